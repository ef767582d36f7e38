package steward

import (
	"fmt"
	"runtime"
)

// Version is the version of Steward this runtime belongs to, as the Python distribution
// `steward` names it; a build may set it with -ldflags "-X
// github.com/steward-dev/steward/runtimes/go/steward.Version=...".
var Version = "0.1.0"

// Runtime is the steward_build_info runtime label of this runtime.
const Runtime = "go"

// VersionLine is what --version prints: "NAME VERSION (go1.x.y, os/arch)".
func VersionLine(name string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", name, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// writeBuildInfo writes steward_build_info, as kube's components write kubernetes_build_info.
func writeBuildInfo(p promWriter) {
	p.family("steward_build_info", "gauge", "A metric with a constant '1' value labeled by the version of Steward, its runtime and the platform it runs on.")
	p.sample("steward_build_info", 1, "platform", runtime.GOOS+"/"+runtime.GOARCH, "runtime", Runtime, "runtime_version", runtime.Version(), "version", Version)
}
