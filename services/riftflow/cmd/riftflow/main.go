// Command riftflow is riftflow's CLI; see package riftflow or `riftflow help`.
package main

import (
	"os"

	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/services/riftflow"
)

func main() {
	defer redact.Panics(os.Stderr)
	os.Exit(riftflow.Main(os.Args[1:], os.Stdout, os.Stderr))
}
