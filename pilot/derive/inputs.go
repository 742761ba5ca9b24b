package derive

import (
	"fmt"
	"slices"
	"strings"
)

// MaxInputs is how many inputs one output may declare: a Key holds them in a fixed array so that it stays
// comparable and free to build.
const MaxInputs = 12

// Input is one thing an output is built from, and what a change of it costs the list derived from the last.
type Input[C any, O comparable] struct {
	// Name names the input in docs, errors and tests.
	Name string
	// Of returns the input's identity in c: a comparable value (an index's pointer, a config pointer) that
	// differs whenever what the output reads of the input may differ.
	Of func(c C) any
	// Readers says a change rebuilds only the owners whose build reported reading the input (Reads).
	Readers bool
	// Affected, when set, says which owners a change from the identity prev to the one in c touches, from
	// the owners of the previous list; all asks for a full build. Readers are rebuilt as well when Readers is set.
	Affected func(c C, prev any, owners []O) (touched []O, all bool)
	// Members says the input is the set of owners itself (a scope): a change is the difference between the
	// previous owners and the current ones, which every derivation computes.
	Members bool
}

// Inputs is an output's declaration: everything it reads, in a fixed order.
type Inputs[C any, O comparable] struct {
	list []Input[C, O]
}

// Declare returns the declaration of an output's inputs. An input that is neither Members, Readers nor
// Affected makes any change of it a full build: the safe default for an input added without more thought.
func Declare[C any, O comparable](inputs ...Input[C, O]) *Inputs[C, O] {
	if len(inputs) > MaxInputs {
		panic(fmt.Sprintf("derive: %d inputs declared, at most %d", len(inputs), MaxInputs))
	}
	seen := map[string]bool{}
	for _, in := range inputs {
		if in.Name == "" || in.Of == nil || seen[in.Name] {
			panic(fmt.Sprintf("derive: input %q must have a unique name and an Of", in.Name))
		}
		seen[in.Name] = true
	}
	return &Inputs[C, O]{list: inputs}
}

// Key is the identity of every declared input of one build: two builds with equal keys read the same inputs.
type Key struct {
	ids [MaxInputs]any
}

// Key reads the identity of every input in c.
func (d *Inputs[C, O]) Key(c C) Key {
	var k Key
	for i, in := range d.list {
		k.ids[i] = in.Of(c)
	}
	return k
}

// Names lists the declared inputs in order.
func (d *Inputs[C, O]) Names() []string {
	out := make([]string, len(d.list))
	for i, in := range d.list {
		out[i] = in.Name
	}
	return out
}

// Changed names the inputs whose identity differs between two keys.
func (d *Inputs[C, O]) Changed(a, b Key) []string {
	var out []string
	for i, in := range d.list {
		if a.ids[i] != b.ids[i] {
			out = append(out, in.Name)
		}
	}
	return out
}

// Reads is the set of Readers inputs an owner's build read.
type Reads uint16

// Read returns the Reads of the named input, which must be declared with Readers.
func (d *Inputs[C, O]) Read(name string) Reads {
	for i, in := range d.list {
		if in.Name == name {
			if !in.Readers {
				panic("derive: input " + name + " is not declared with Readers")
			}
			return 1 << i
		}
	}
	panic("derive: no input " + name + " declared; have " + strings.Join(d.Names(), ", "))
}

// With returns a declaration of d's inputs followed by more: an output that reads one more input.
func (d *Inputs[C, O]) With(more ...Input[C, O]) *Inputs[C, O] {
	return Declare(append(slices.Clone(d.list), more...)...)
}
