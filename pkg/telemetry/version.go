package telemetry

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release riftflow was built as. `make build` and the
// Dockerfile stamp it at link time:
//
//	go build -ldflags "-X github.com/riftflow/riftflow/pkg/telemetry.Version=v0.2.0" ...
//
// An unstamped build reports "dev".
var Version = "dev"

// Revision is the VCS commit the binary was built from, when the Go
// toolchain recorded one (vcs.revision; "" in -buildvcs=false builds, such
// as the Docker image, where -X ...telemetry.Revision=<sha> stamps it).
var Revision = ""

// BuildInfo is what `<binary> version` prints and riftflow_build_info
// exports.
type BuildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"go_version"`
}

// ReadBuildInfo returns the stamped version, the commit (from the stamp or
// the Go toolchain's VCS information) and the Go version.
func ReadBuildInfo() BuildInfo {
	bi := BuildInfo{Version: Version, Revision: Revision, GoVersion: runtime.Version()}
	if bi.Revision == "" {
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				if s.Key == "vcs.revision" {
					bi.Revision = s.Value
				}
			}
		}
	}
	return bi
}

// String is the one line `<binary> version` prints: "v0.2.0 (commit abc123, go1.26.0)".
func (b BuildInfo) String() string {
	s := b.Version + " ("
	if b.Revision != "" {
		s += "commit " + b.Revision + ", "
	}
	return s + b.GoVersion + ")"
}

// newBuildInfoCollector is the riftflow_build_info gauge: always 1, its
// labels say which build runs (version, revision, goversion), the
// Prometheus convention for joining a version onto other series.
func newBuildInfoCollector(service string) prometheus.Collector {
	bi := ReadBuildInfo()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "riftflow_build_info",
		Help: "A constant 1 labelled with the running build: version, revision (VCS commit), goversion and service.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion,
			"service": service},
	}, func() float64 { return 1 })
}
