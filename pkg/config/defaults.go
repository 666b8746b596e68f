package config

import (
	"fmt"
	"reflect"

	"github.com/caarlos0/env/v11"
)

// Defaults gives each zero field of *cfg the default its envDefault tag
// names, searching nested structs: a stage's defaults are written once, in
// its Config's tags, and hold alike for a Config parsed from the
// environment (Parse) and one built in code (tests, riftflow up). A field
// without a tag keeps its zero value; a negative number is kept (Configs
// use it for "off"); so are a bool (false cannot be told from unset) and a
// field tagged zero:"keep", whose zero is a value of its own
// (JOB_HISTORY_MAX_FAILED=0: no cap). T must be a struct type whose tags parse; Defaults
// panics otherwise, a programming error.
func Defaults[T any](cfg *T) {
	var d T
	if err := env.ParseWithOptions(&d, env.Options{Environment: map[string]string{}}); err != nil {
		panic(fmt.Sprintf("config.Defaults(%T): %v", cfg, err))
	}
	fillZero(reflect.ValueOf(cfg).Elem(), reflect.ValueOf(d))
}

// fillZero sets each zero settable field of v to the same field of d,
// descending into struct fields that are not zero themselves.
func fillZero(v, d reflect.Value) {
	for i := range v.NumField() {
		f, def := v.Field(i), d.Field(i)
		switch {
		case !f.CanSet() || def.IsZero() || f.Kind() == reflect.Bool || v.Type().Field(i).Tag.Get("zero") == "keep":
		case f.IsZero():
			f.Set(def)
		case f.Kind() == reflect.Struct:
			fillZero(f, def)
		}
	}
}

// Fill gives each field of *cfg that is zero or a negative number the
// value of the same field of defaults, when that value is not zero: the
// defaults of a value with no environment of its own (fetchpolicy.Policy),
// written once as a struct literal. Fields meant to hold a negative value
// (e.g. "off") must not be given a default here; a stage's Config takes
// its defaults from its tags (Defaults). T must be a struct type; unexported fields are left alone.
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
