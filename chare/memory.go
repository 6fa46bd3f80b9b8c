package chare

import (
	"bufio"
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
