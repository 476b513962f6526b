package collector

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestEverySourceIsListedInSourceKinds: every Source constant of the
// package has its line in sourceKinds (a source left out would have no
// layer, no fix naming what it reads, and no wait series), and the sources
// with per-tag figures come first, as the API lists them.
func TestEverySourceIsListedInSourceKinds(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []Source
	for _, f := range pkgs["collector"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || vs.Type == nil || len(vs.Values) != len(vs.Names) {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Source" {
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						declared = append(declared, Source(s))
					}
				}
			}
			return true
		})
	}
	if len(declared) < 7 {
		t.Fatalf("found %d Source constants (%v): the test no longer reads them", len(declared), declared)
	}
	listed := map[Source]bool{}
	for _, k := range sourceKinds {
		listed[k.Source] = true
	}
	for _, s := range declared {
		if !listed[s] {
			t.Errorf("Source %q is not in sourceKinds", s)
		}
	}
	tagged := true
	for _, k := range sourceKinds {
		if k.layer == "" {
			tagged = false
		} else if !tagged {
			t.Errorf("%s has a layer but follows a source without one", k.Source)
		}
		if !k.push && k.reads == "" && k.fix == "" {
			t.Errorf("%s is polled but names nothing it reads for its down fix", k.Source)
		}
	}
	for _, l := range []Layer{LayerProxy, LayerServer} {
		if gaugeSource(l) == "" {
			t.Errorf("layer %s has no source of its current sessions", l)
		}
	}
}
