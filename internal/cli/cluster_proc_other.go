//go:build !linux

package cli

import "syscall"

// childProcAttr leaves a broker started by `cluster up` in this process's
// group outside Linux (Setpgid and Pdeathsig are not portable): a Ctrl-C in
// the terminal then reaches the brokers directly as well as through
// `cluster up`, and brokers outlive a `cluster up` killed with kill -9.
func childProcAttr() *syscall.SysProcAttr { return nil }
