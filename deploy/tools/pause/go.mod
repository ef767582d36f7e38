// Steward's own pause program, the sandbox process of the real nodes' pods (see
// tools/src/steward/cluster/binaries.py). The standard library alone.
module steward.local/deploy/tools/pause

go 1.26.0
