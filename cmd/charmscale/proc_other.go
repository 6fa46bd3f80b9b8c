//go:build !linux

package main

import "os/exec"

// ownGroup: elsewhere a launch is ended alone (charmrun ends its job).
func ownGroup(cmd *exec.Cmd) {}
