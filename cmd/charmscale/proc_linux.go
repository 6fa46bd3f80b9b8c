package main

import (
	"os/exec"
	"syscall"
)

// ownGroup runs a launch in its own process group, and ends it if
// charmscale dies (even by SIGKILL): no run outlives the sweep. Ending it
// ends its group (charmrun ends the job's processes as it goes).
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
}
