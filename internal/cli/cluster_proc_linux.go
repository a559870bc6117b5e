package cli

import "syscall"

// childProcAttr puts a broker started by `cluster up` in its own process
// group, so a Ctrl-C in the terminal reaches only `cluster up`, which then
// stops each broker once with SIGTERM (a second signal would make a broker
// exit at once instead of cleanly). Pdeathsig sends the broker SIGTERM if
// `cluster up` dies without stopping it (kill -9), so none is left behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
