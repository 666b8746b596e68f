package connect

import "testing"

func TestCheckServerVersion(t *testing.T) {
	for v, ok := range map[string]bool{"2.9.10": false, "2.11.3": false, "2.12.0": true, "2.15.2": true,
		"v2.14.0-beta.1": true, "3.0.0": true, "": true} {
		if err := CheckServerVersion(v); (err == nil) != ok {
			t.Errorf("%q: err = %v, want ok=%v", v, err, ok)
		}
	}
}
