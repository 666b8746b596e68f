module github.com/riftflow/riftflow/migrations

go 1.26.0
