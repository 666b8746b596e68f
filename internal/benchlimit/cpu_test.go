package benchlimit

import (
	"syscall"
	"testing"
)

// TestHogsStopReapsThem: StartHogs starts live processes in their own
// process groups, and Stop kills and reaps every one.
func TestHogsStopReapsThem(t *testing.T) {
	h, err := StartHogs(2)
	if err != nil {
		t.Fatal(err)
	}
	procs := h.procs
	if len(procs) != 2 {
		t.Fatalf("%d hogs, want 2", len(procs))
	}
	for _, p := range procs {
		pid := p.cmd.Process.Pid
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
			t.Errorf("hog %d: process group %d (%v), want its own", pid, pgid, err)
		}
	}
	h.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			t.Errorf("hog %d not reaped after Stop", p.cmd.Process.Pid)
		}
		if p.cmd.ProcessState == nil || p.cmd.ProcessState.Success() {
			t.Errorf("hog %d: state %v, want killed", p.cmd.Process.Pid, p.cmd.ProcessState)
		}
	}
	if h.procs != nil {
		t.Error("Stop left its processes listed")
	}
}
