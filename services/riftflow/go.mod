module github.com/riftflow/riftflow/services/riftflow

go 1.26.0

require (
	github.com/riftflow/riftflow/pkg v0.0.0
	github.com/riftflow/riftflow/services/match-fetcher v0.0.0
	github.com/riftflow/riftflow/services/matchid-lister v0.0.0
	github.com/riftflow/riftflow/services/persister v0.0.0
	github.com/riftflow/riftflow/services/resolver v0.0.0
	github.com/riftflow/riftflow/services/retry-sweeper v0.0.0
	github.com/riftflow/riftflow/streams v0.0.0
)

replace (
	github.com/riftflow/riftflow/migrations => ../../migrations
	github.com/riftflow/riftflow/pkg => ../../pkg
	github.com/riftflow/riftflow/services/match-fetcher => ../match-fetcher
	github.com/riftflow/riftflow/services/matchid-lister => ../matchid-lister
	github.com/riftflow/riftflow/services/persister => ../persister
	github.com/riftflow/riftflow/services/resolver => ../resolver
	github.com/riftflow/riftflow/services/retry-sweeper => ../retry-sweeper
	github.com/riftflow/riftflow/streams => ../../streams
)
