package fsm

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// immutableVars are the package-level variables of the package's source
// besides its sentinel errors (a var whose value is errors.New(...), which
// is allowed by that form), each with why it may be a variable: Go has no
// constant slices, maps, arrays of bytes or compiled expressions, so these
// are tables written once by their initialiser and only read after.
// TestNoMutablePackageState refuses a package-level variable not listed
// here, and any write to any of them.
var immutableVars = map[string]string{
	// The registry, built by buildRegistry as the package is initialised
	// (registry.go says why it is a package value and not built by Open).
	"assembled":         "the modules' registry, built once by buildRegistry",
	"Modes":             "the schema registry's modes",
	"configDefs":        "the share groups' configs and their defaults",
	"SchemaValidations": "the values of stele.*.schema.validation",
	// Keys and prefixes of the store, and fixed byte strings of formats.
	"keyState":                  "store key m/state",
	"KeyProducerID":             "store key m/producer-id",
	"keySigners":                "store key m/signers",
	"KeyLogDefaults":            "store key m/log-defaults",
	"KeyBrokerConfigs":          "store key m/broker-configs",
	"KeyAppendClock":            "store key m/append-time",
	"keyAppVersion":             "store key u/version",
	"keyUpgradePlan":            "store key u/plan",
	"upgradeVotePfx":            "store prefix u/vote/",
	"validatorPfx":              "store prefix u/validator/",
	"brokerPfx":                 "store prefix u/broker/",
	"keyMembershipEpoch":        "store key u/membership-epoch",
	"memberVotePfx":             "store prefix u/member-vote/",
	"membershipStatementPrefix": "a signed statement's domain prefix",
	"aliveStatementPrefix":      "a signed statement's domain prefix",
	"replicaAlivePfx":           "store prefix u/replica-alive/",
	"unauthenticated":           "the store prefixes outside the state trie",
	"statementPrefix":           "the domain of a batch statement's signature",
	"chainStatementPrefix":      "the domain of a chain-bound batch statement's signature",
	"upgradeStatementPrefix":    "the domain of an upgrade statement's signature",
	"TxMagic":                   "a transaction's first bytes",
	// Tables of definitions.
	"TopicConfigs":          "the topic configs' definitions",
	"brokerConfigs":         "the dynamic broker configs' definitions",
	"messageFormatVersions": "the values message.format.version accepts",
	"ConsumerAssignors":     "KIP-848's server-side assignors (exported, read by no other package)",
	"validOverrideHost":     "a compiled regexp (safe for concurrent use)",
	"QuotaKeys":             "the tenants' quota keys",
	"quotaKeysV4":           "the quota keys app version 4 knows",
	"Removed":               "the kinds DeleteTenant's answer counts",
}

// registrationPrefixes name the functions and methods that write a
// registry (register, registerStep, a hook point's register, the
// modules' registerX, setDigestDomain): called with a package-level
// variable, as receiver or argument, they would change it after
// initialisation.
var registrationPrefixes = []string{"register", "setDigestDomain"}

// TestNoMutablePackageState reads the package's source and holds it to
// CONVENTIONS.md ("No package-level mutable variables, no init() side
// effects"): no file of the package, tests included, declares an init
// function; every package-level variable of its source (not its tests)
// is a sentinel error or listed in immutableVars; and no file, tests
// included, writes one after its initialiser: no assignment (=, op=,
// ++, --, a range clause's =) to the variable or to a field, element or
// pointee reached from it, no taking its address (or that of a part of
// it), no clear, copy or delete on it, and no call of a registration
// function or method (registrationPrefixes) with it as receiver or
// argument. It is a reading of the source, not of types: a write through
// a copy of a slice or pointer held elsewhere is not seen, which is why
// the tables are kept to slices, maps and values nothing hands out for
// writing.
func TestNoMutablePackageState(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{} // by path: the package's and the core's (core/)
	for _, dir := range append([]string{".", "core"}, sortedModulePackages()...) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files[path] = f
		}
	}
	// The sentinel errors of the core and the module packages, which the
	// package passes on under the same names (core_api.go: var ErrX =
	// core.ErrX).
	coreSentinels := map[string]bool{} // pkg.Name
	for name, f := range files {
		dir := filepath.Dir(name)
		if dir == "." {
			continue
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) && isErrorsNew(vs.Values[i]) {
							coreSentinels[dir+"."+n.Name] = true
						}
					}
				}
			}
		}
	}
	isCoreSentinel := func(name string, v ast.Expr) bool {
		sel, ok := v.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && sel.Sel.Name == name && coreSentinels[x.Name+"."+name]
	}
	vars := map[string]string{} // name: the file declaring it
	for _, name := range core.SortedKeys(files) {
		for _, d := range files[name].Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == "init" {
					t.Errorf("%s: func init: register through buildRegistry (registry.go) instead", fset.Position(d.Pos()))
				}
			case *ast.GenDecl:
				if d.Tok != token.VAR || strings.HasSuffix(name, "_test.go") {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if n.Name == "_" {
							continue
						}
						vars[n.Name] = name
						if _, ok := immutableVars[n.Name]; ok || i < len(vs.Values) && (isErrorsNew(vs.Values[i]) || isCoreSentinel(n.Name, vs.Values[i])) {
							continue
						}
						t.Errorf("%s: package-level var %s is neither a sentinel error nor an immutable table listed in immutableVars (package_state_test.go): "+
							"put mutable state in FSM or in what buildRegistry builds", fset.Position(n.Pos()), n.Name)
					}
				}
			}
		}
	}
	for name := range immutableVars {
		if _, ok := vars[name]; !ok {
			t.Errorf("immutableVars lists %s, which the package does not declare: drop it", name)
		}
	}

	var writes []string
	for _, name := range core.SortedKeys(files) {
		writes = append(writes, packageVarWrites(fset, files[name], vars)...)
	}
	sort.Strings(writes)
	for _, w := range writes {
		t.Errorf("%s: a package-level var is written after its initialiser", w)
	}
}

// TestNoMutablePackageStateSees: the reading above finds each kind of
// write it looks for, in a file made for it, and nothing else.
func TestNoMutablePackageStateSees(t *testing.T) {
	src := `package p
var table = []int{1}
var reg = build()
func f() {
	table[0] = 2
	reg.steps = nil
	table = nil
	reg.n++
	_ = &table
	clear(table)
	reg.registerStep(nil)
	register(reg, 1)
	for table[0] = range table {}
	x := table[0]
	_ = reg.commands[x]
}
func g(table []int) { table[0] = 1 }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := packageVarWrites(fset, f, map[string]string{"table": "p.go", "reg": "p.go"})
	// f's nine writes; g's parameter shadows the table; reads are not
	// writes.
	if len(got) != 9 {
		t.Errorf("found %d writes, want 9: %q", len(got), got)
	}
}

// packageVarWrites lists where f writes a variable of vars (name: the
// file declaring it), as TestNoMutablePackageState describes. Names
// declared locally shadow the package's (a parameter, or a := named like
// a table): the check is by name within a function, so a function that
// declares the name is not checked for it.
func packageVarWrites(fset *token.FileSet, f *ast.File, vars map[string]string) []string {
	var writes []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		local := localNames(fd)
		written := func(e ast.Expr, how string) {
			if id := rootIdent(e); id != nil && vars[id.Name] != "" && !local[id.Name] {
				writes = append(writes, fmt.Sprintf("%s: %s %s (declared in %s)", fset.Position(e.Pos()), how, id.Name, vars[id.Name]))
			}
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if n.Tok != token.DEFINE {
					for _, l := range n.Lhs {
						written(l, "assigns")
					}
				}
			case *ast.IncDecStmt:
				written(n.X, "increments or decrements")
			case *ast.RangeStmt:
				if n.Tok == token.ASSIGN {
					written(n.Key, "ranges into")
					if n.Value != nil {
						written(n.Value, "ranges into")
					}
				}
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					written(n.X, "takes the address of")
				}
			case *ast.CallExpr:
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					if (fn.Name == "clear" || fn.Name == "copy" || fn.Name == "delete") && len(n.Args) > 0 {
						written(n.Args[0], fn.Name+"s")
					}
					if isRegistration(fn.Name) {
						for _, a := range n.Args {
							written(a, "registers into")
						}
					}
				case *ast.SelectorExpr:
					if isRegistration(fn.Sel.Name) {
						written(fn.X, "registers into")
						for _, a := range n.Args {
							written(a, "registers into")
						}
					}
				}
			}
			return true
		})
	}
	return writes
}

// isErrorsNew says e is errors.New(...).
func isErrorsNew(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	s, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := s.X.(*ast.Ident)
	return ok && x.Name == "errors" && s.Sel.Name == "New"
}

// isRegistration says a function or method of that name writes a
// registry (registrationPrefixes).
func isRegistration(name string) bool {
	return slices.ContainsFunc(registrationPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// rootIdent is the variable e reaches: x for x, x.f, x[i], x[i:j], *x,
// (x), x.f[i].g; nil for anything else (a call's result, a literal).
func rootIdent(e ast.Expr) *ast.Ident {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x
		case *ast.SelectorExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SliceExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// localNames are the names fd declares: its receiver, parameters and
// results, and every name declared in its body (:=, var, range, closures'
// parameters).
func localNames(fd *ast.FuncDecl) map[string]bool {
	names := map[string]bool{}
	addFields := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			for _, n := range f.Names {
				names[n.Name] = true
			}
		}
	}
	addFields(fd.Recv)
	addFields(fd.Type.Params)
	addFields(fd.Type.Results)
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				names[id.Name] = true
			}
		case *ast.FuncLit:
			addFields(n.Type.Params)
			addFields(n.Type.Results)
		}
		return true
	})
	return names
}
