package main

import (
	"os"
	"path/filepath"
)

// applier puts the generated config where Sextant reads it. A unit is what one file holds in the file
// source: a name and the multi-document YAML of its objects.
type applier interface {
	// apply makes unit name hold exactly the objects in content (creating, updating and deleting objects);
	// begin, when not nil, is called just before the first write, where a measured change's clock starts.
	apply(name, content string, begin func()) error
	// remove deletes unit name and everything in it.
	remove(name string) error
	// load applies the whole initial mesh, units[0] (the Namespaces and Nodes) before the rest.
	load(units []unit) error
}

type unit struct{ name, content string }

// fileApplier writes each unit as a file in the directory `sextant discovery --config-dir` watches.
type fileApplier struct{ dir string }

// apply replaces the file atomically: a reader never sees half of it. The temporary name is not a config
// file name (and not hidden, which would make the source rescan the whole directory).
func (f fileApplier) apply(name, content string, begin func()) error {
	if begin != nil {
		begin()
	}
	tmp := filepath.Join(f.dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(f.dir, name))
}

func (f fileApplier) remove(name string) error { return os.Remove(filepath.Join(f.dir, name)) }

func (f fileApplier) load(units []unit) error {
	for _, u := range units {
		if err := f.apply(u.name, u.content, nil); err != nil {
			return err
		}
	}
	return nil
}
