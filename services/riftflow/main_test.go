package riftflow

import (
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
