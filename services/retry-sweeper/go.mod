module github.com/riftflow/riftflow/services/retry-sweeper

go 1.26.0

require (
	github.com/riftflow/riftflow/pkg v0.0.0
	github.com/robfig/cron/v3 v3.0.1
	github.com/riftflow/riftflow/streams v0.0.0
)

replace (
	github.com/riftflow/riftflow/migrations => ../../migrations
	github.com/riftflow/riftflow/pkg => ../../pkg
	github.com/riftflow/riftflow/streams => ../../streams
)
