package config

import "reflect"

// Fill gives each field of *cfg that is zero or a negative number the
// value of the same field of defaults, when that value is not zero: the
// defaults of a stage's Config written once, as a struct literal, for
// callers (tests, `riftflow up`) that leave fields unset. Fields a Config
// means to hold a negative value (e.g. "off") must not be given a default
// here. T must be a struct type; unexported fields are left alone.
func Fill[T any](cfg *T, defaults T) {
	v, d := reflect.ValueOf(cfg).Elem(), reflect.ValueOf(defaults)
	for i := range v.NumField() {
		f, def := v.Field(i), d.Field(i)
		if !f.CanSet() || def.IsZero() {
			continue
		}
		if f.IsZero() || negative(f) {
			f.Set(def)
		}
	}
}

// negative says whether v is a signed number below zero (a time.Duration
// included).
func negative(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() < 0
	case reflect.Float32, reflect.Float64:
		return v.Float() < 0
	}
	return false
}
