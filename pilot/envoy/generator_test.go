package envoy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
)

// mergeByName equals sorting the two lists together, a's resource first on equal names.
func TestMergeByName(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	list := func(n int, tag string) model.Resources {
		var out model.Resources
		for range n {
			out = append(out, &model.Resource{Name: fmt.Sprintf("r%02d", rng.IntN(40)), Version: tag})
		}
		slices.SortStableFunc(out, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	for range 500 {
		a, b := list(rng.IntN(30), "a"), list(rng.IntN(5), "b")
		want := slices.Concat(a, b)
		slices.SortStableFunc(want, func(x, y *model.Resource) int { return strings.Compare(x.Name, y.Name) })
		got := mergeByName(a, b)
		if !slices.Equal(got, want) {
			t.Fatalf("merge of %d and %d resources differs", len(a), len(b))
		}
	}
}
