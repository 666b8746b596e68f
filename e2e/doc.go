// Package e2e holds the pipeline's tests across services, black-box: they
// run the five services through their exported packages, either all in the
// test process (services/riftflow/stack/stacktest, as `riftflow up` runs
// them) or as separate OS processes built from their cmd mains (the chaos
// suite, the soak, the process benchmarks), drive them with ingest
// requests, the HTTP API and the CLI (riftflow.Main), and check the end
// state in Postgres, the streams and the simulator's ground truth. The
// package has no code outside its tests.
//
// make test runs every test here, the chaos cases and the soak as a job of
// their own; make chaos, make soak and the make bench-* targets run them
// at full length, with the environment knobs RIFTFLOW_CHAOS, CHAOS_REPORT,
// CHAOS_LOG_DIR, SOAK, SOAK_OUT and BENCH_* (docs/chaos.md,
// docs/rate-limiting.md, docs/throughput.md).
package e2e
