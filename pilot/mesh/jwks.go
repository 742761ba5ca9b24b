package mesh

import (
	"fmt"
	"time"
)

// JWKSFetch bounds how Sextant fetches the key sets of RequestAuthentication rules (from jwksUri, or through
// the issuer's OpenID discovery). istiod takes these from environment variables; the defaults are its own,
// with a size bound it does not have. Durations are Go durations ("30s", "20m").
type JWKSFetch struct {
	// Timeout bounds one fetch, discovery and key set together, when the rule sets no timeout (default 5s,
	// istiod's); a rule's timeout is capped at MaxTimeout.
	Timeout string `json:"timeout,omitempty"`
	// MaxTimeout caps a rule's own timeout (default 30s).
	MaxTimeout string `json:"maxTimeout,omitempty"`
	// MaxBytes is the largest response read (default 1 MiB): a longer one fails the fetch.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// RefreshInterval is how often a key set is fetched again after a success (default 20m).
	RefreshInterval string `json:"refreshInterval,omitempty"`
	// RetryInterval is how soon a failed fetch is tried again (default 1m).
	RetryInterval string `json:"retryInterval,omitempty"`
	// MaxStale is how long the last good key set is kept while every refresh fails (default 168h, istiod's
	// eviction): after that its tokens are rejected.
	MaxStale string `json:"maxStale,omitempty"`
}

// JWKSFetchSettings are the JWKSFetch values in force, parsed, with defaults applied.
type JWKSFetchSettings struct {
	Timeout, MaxTimeout, RefreshInterval, RetryInterval, MaxStale time.Duration
	MaxBytes                                                      int64
}

// Settings returns the values in force. Parse has checked them, so a value that does not parse (only
// possible on a Config built by hand) falls back to its default.
func (j JWKSFetch) Settings() JWKSFetchSettings {
	s := JWKSFetchSettings{Timeout: 5 * time.Second, MaxTimeout: 30 * time.Second, RefreshInterval: 20 * time.Minute,
		RetryInterval: time.Minute, MaxStale: 7 * 24 * time.Hour, MaxBytes: 1 << 20}
	for _, f := range []struct {
		v   string
		dst *time.Duration
	}{{j.Timeout, &s.Timeout}, {j.MaxTimeout, &s.MaxTimeout}, {j.RefreshInterval, &s.RefreshInterval},
		{j.RetryInterval, &s.RetryInterval}, {j.MaxStale, &s.MaxStale}} {
		if d, err := time.ParseDuration(f.v); err == nil && d > 0 {
			*f.dst = d
		}
	}
	if j.MaxBytes > 0 {
		s.MaxBytes = j.MaxBytes
	}
	return s
}

func (j JWKSFetch) validate() error {
	for _, f := range []struct{ name, v string }{{"timeout", j.Timeout}, {"maxTimeout", j.MaxTimeout},
		{"refreshInterval", j.RefreshInterval}, {"retryInterval", j.RetryInterval}, {"maxStale", j.MaxStale}} {
		if f.v == "" {
			continue
		}
		if d, err := time.ParseDuration(f.v); err != nil || d <= 0 {
			return fmt.Errorf("field jwksFetch.%s: %q is not a positive duration", f.name, f.v)
		}
	}
	if j.MaxBytes < 0 {
		return fmt.Errorf("field jwksFetch.maxBytes: %d is negative", j.MaxBytes)
	}
	return nil
}

// overlay sets the fields o sets.
func (j *JWKSFetch) overlay(o JWKSFetch) {
	for _, f := range []struct {
		dst *string
		v   string
	}{{&j.Timeout, o.Timeout}, {&j.MaxTimeout, o.MaxTimeout},
		{&j.RefreshInterval, o.RefreshInterval}, {&j.RetryInterval, o.RetryInterval}, {&j.MaxStale, o.MaxStale}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if o.MaxBytes != 0 {
		j.MaxBytes = o.MaxBytes
	}
}
