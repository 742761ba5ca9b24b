package buildcache

import (
	"errors"
	"testing"
)

// A slot is rebuilt when its key changes and only then; names do not share slots.
func TestSlotsRebuildOnKeyChange(t *testing.T) {
	s := NewSlots[int, string]()
	builds := 0
	get := func(name string, key int) string {
		t.Helper()
		v, err := s.Get(name, key, func() (string, error) {
			builds++
			return name + "@" + string(rune('0'+key)), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := get("a", 1); v != "a@1" || builds != 1 {
		t.Fatalf("first Get = %q after %d builds", v, builds)
	}
	if v := get("a", 1); v != "a@1" || builds != 1 {
		t.Errorf("same key: %q after %d builds, want a@1 from the one build", v, builds)
	}
	if v := get("b", 1); v != "b@1" || builds != 2 {
		t.Errorf("another name: %q after %d builds, want its own build", v, builds)
	}
	if v := get("a", 2); v != "a@2" || builds != 3 {
		t.Errorf("changed key: %q after %d builds, want a rebuild", v, builds)
	}
	if v := get("a", 2); v != "a@2" || builds != 3 {
		t.Errorf("the new key again: %q after %d builds, want no build", v, builds)
	}
	// One slot per name: the first key is gone once replaced.
	if v := get("a", 1); v != "a@1" || builds != 4 {
		t.Errorf("back to the first key: %q after %d builds, want a rebuild", v, builds)
	}
}

// A failed build returns its error and leaves the slot as it was.
func TestSlotsErrorNotStored(t *testing.T) {
	s := NewSlots[int, string]()
	boom := errors.New("boom")
	if _, err := s.Get("a", 1, func() (string, error) { return "a1", nil }); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get("a", 2, func() (string, error) { return "partial", boom }); !errors.Is(err, boom) || v != "" {
		t.Errorf("failed build = %q, %v; want the zero value and its error", v, err)
	}
	if v, _ := s.Get("a", 1, func() (string, error) { return "rebuilt", nil }); v != "a1" {
		t.Errorf("after a failed build for another key, Get(a, 1) = %q, want the stored a1", v)
	}
	built := false
	if v, _ := s.Get("a", 2, func() (string, error) { built = true; return "a2", nil }); v != "a2" || !built {
		t.Errorf("the failed key was not built again: %q, built %v", v, built)
	}
}
