package benchlimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupRoot is the cgroup v1 cpu controller's mount (this machine's
// hybrid layout; Kubernetes' CPU limits are the same CFS quota).
const CgroupRoot = "/sys/fs/cgroup/cpu"

// Cgroup is a cgroup v1 cpu group whose processes together get at most
// QuotaUS of CPU time per PeriodUS (cpu.cfs_quota_us, cpu.cfs_period_us):
// a Kubernetes CPU limit of QuotaUS/PeriodUS cores. Creating one needs root.
type Cgroup struct {
	Dir               string
	QuotaUS, PeriodUS int
}

// NewCgroup creates the group name under CgroupRoot with the quota.
func NewCgroup(name string, quotaUS, periodUS int) (*Cgroup, error) {
	if quotaUS <= 0 || periodUS <= 0 {
		return nil, errors.New("benchlimit: cgroup quota and period must be > 0 µs")
	}
	dir := filepath.Join(CgroupRoot, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("benchlimit: create cgroup (cgroup v1 cpu controller, as root): %w", err)
	}
	g := &Cgroup{Dir: dir, QuotaUS: quotaUS, PeriodUS: periodUS}
	if err := g.write("cpu.cfs_period_us", strconv.Itoa(periodUS)); err != nil {
		return nil, err
	}
	if err := g.write("cpu.cfs_quota_us", strconv.Itoa(quotaUS)); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Cgroup) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(g.Dir, file), []byte(v), 0o644); err != nil {
		return fmt.Errorf("benchlimit: cgroup %s: %w", file, err)
	}
	return nil
}

// Add moves process pid (its threads too) into the group.
func (g *Cgroup) Add(pid int) error { return g.write("cgroup.procs", strconv.Itoa(pid)) }

// Throttled reads cpu.stat: the periods in which the group was throttled,
// of all periods, and the total time it was throttled.
func (g *Cgroup) Throttled() (throttled, periods int, ns int64) {
	raw, err := os.ReadFile(filepath.Join(g.Dir, "cpu.stat"))
	if err != nil {
		return 0, 0, 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "nr_throttled":
			throttled = int(v)
		case "nr_periods":
			periods = int(v)
		case "throttled_time":
			ns = v
		}
	}
	return throttled, periods, ns
}

// Remove moves any process left in the group to the root group and
// removes the group.
func (g *Cgroup) Remove() error {
	if raw, err := os.ReadFile(filepath.Join(g.Dir, "cgroup.procs")); err == nil {
		for _, p := range strings.Fields(string(raw)) {
			_ = os.WriteFile(filepath.Join(CgroupRoot, "cgroup.procs"), []byte(p), 0o644)
		}
	}
	return os.Remove(g.Dir)
}

// Hogs are busy-looping processes that keep cores busy beside a case.
type Hogs struct{ procs []*proc }

// StartHogs starts n processes that spin until Stop, each in its own
// process group (start), their output discarded.
func StartHogs(n int) (*Hogs, error) {
	h := &Hogs{}
	for range n {
		p, err := start("sh", []string{"-c", "while :; do :; done"}, nil, os.DevNull)
		if err != nil {
			h.Stop()
			return nil, err
		}
		h.procs = append(h.procs, p)
	}
	return h, nil
}

// Stop kills the hogs it started (by their process IDs) and reaps them.
func (h *Hogs) Stop() {
	for _, p := range h.procs {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	h.procs = nil
}

// LoadAvg is the 1-minute load average (/proc/loadavg), 0 if unreadable.
func LoadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
