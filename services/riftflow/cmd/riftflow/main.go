// Command riftflow is riftflow's CLI; see package riftflow or `riftflow help`.
package main

import (
	"os"

	"github.com/riftflow/riftflow/services/riftflow"
)

func main() { os.Exit(riftflow.Main(os.Args[1:], os.Stdout, os.Stderr)) }
