// Command etcd is the etcd server of the local control plane: a thin entry
// point over the pinned etcd server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
