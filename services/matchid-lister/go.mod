module github.com/riftflow/riftflow/services/matchid-lister

go 1.26.0

require (
	github.com/riftflow/riftflow/pkg v0.0.0
	github.com/riftflow/riftflow/streams v0.0.0
)

replace (
	github.com/riftflow/riftflow/migrations => ../../migrations
	github.com/riftflow/riftflow/pkg => ../../pkg
	github.com/riftflow/riftflow/streams => ../../streams
)
