package chare

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// AvailableMemory is what this machine can give a new process: the
// kernel's MemAvailable, or less where a control group limits this
// process (0 where neither can be read).
func AvailableMemory() uint64 {
	avail := meminfo("MemAvailable")
	if max, ok := readUint("/sys/fs/cgroup/memory.max"); ok {
		used, _ := readUint("/sys/fs/cgroup/memory.current")
		if max > used && (avail == 0 || max-used < avail) {
			avail = max - used
		}
	}
	return avail
}

// meminfo reads a /proc/meminfo field, in bytes (0 if absent).
func meminfo(field string) uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

func readUint(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// ParseSize reads a memory size: a whole number of bytes with an optional
// unit K, M, G or T (powers of 1024; KB, KiB and the like are accepted).
func ParseSize(v string) (uint64, error) {
	s := strings.TrimSpace(strings.ToUpper(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := uint64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a memory size (4G, 512M, 1048576)", v)
	}
	return n * mult, nil
}
