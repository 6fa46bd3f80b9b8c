package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

// readNodelist reads Charm++'s node list format: "group NAME [options]"
// starts a group, "host NAME [options]" adds a host to it; the hosts of
// group main are used. Blank lines and lines starting with # are skipped.
func readNodelist(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hosts []string
	group := "main"
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "group":
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: group without a name", n)
			}
			group = fields[1]
		case "host":
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: host without a name", n)
			}
			if group == "main" {
				hosts = append(hosts, fields[1])
			}
		default:
			return nil, fmt.Errorf("line %d: %q: want group NAME or host NAME", n, fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, errors.New("no host in group main")
	}
	return hosts, nil
}
