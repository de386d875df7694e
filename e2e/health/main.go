// rp-health prints what the health checks of Flux (kstatus), Argo CD (resource
// health Lua) and Flux's healthCheckExprs (CEL) say about one ReleasePlan.
//
//	kubectl get releaseplan shop -o json | rp-health -lua health.lua -cel health-check.yaml
//
// It reads the object, as the API server returns it, on stdin and prints one
// JSON line:
//
//	{"kstatus":{"status":"Current","message":"..."},"argocd":{...},"flux":{...}}
//
// With -discovery it also runs an Argo CD resource action discovery script
// ("actions": {"promote": {"disabled": false}, ...}); with -action, an Argo CD
// resource action script, printing the merge patch Argo CD would send
// ("patch": {...}; null when the action changes nothing).
//
// Each answer comes from the consumer's own library, called the way the
// consumer calls it; nothing here re-implements their rules.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type answer struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type report struct {
	Kstatus answer  `json:"kstatus"`
	Argocd  *answer `json:"argocd,omitempty"`
	Flux    *answer `json:"flux,omitempty"`
	// Actions: Argo CD's resource actions offered for the object, by name.
	Actions map[string]action `json:"actions,omitempty"`
	// Patch: the JSON merge patch Argo CD sends for the action run (-action).
	Patch json.RawMessage `json:"patch,omitempty"`
}

type action struct {
	Disabled bool `json:"disabled"`
}

func main() {
	luaFile := flag.String("lua", "", "Argo CD resource health Lua script")
	celFile := flag.String("cel", "", "Flux healthCheckExprs entry (YAML: current, inProgress, failed)")
	discoveryFile := flag.String("discovery", "", "Argo CD resource action discovery Lua script")
	actionFile := flag.String("action", "", "Argo CD resource action Lua script to run")
	flag.Parse()
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	u := &unstructured.Unstructured{}
	// The same decoding as client-go's: integers become int64.
	if err := u.UnmarshalJSON(in); err != nil {
		fail("decoding the object: %v", err)
	}
	var r report
	res, err := status.Compute(u)
	if err != nil {
		r.Kstatus = answer{"Error", err.Error()}
	} else {
		r.Kstatus = answer{string(res.Status), res.Message}
	}
	if *luaFile != "" {
		script, err := os.ReadFile(*luaFile)
		if err != nil {
			fail("%v", err)
		}
		a := argocd(u, string(script))
		r.Argocd = &a
	}
	if *celFile != "" {
		a := flux(u, *celFile)
		r.Flux = &a
	}
	if *discoveryFile != "" {
		r.Actions = discover(u, read(*discoveryFile))
	}
	if *actionFile != "" {
		r.Patch = runAction(in, u, read(*actionFile))
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func read(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		fail("%v", err)
	}
	return string(b)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rp-health: "+format+"\n", args...)
	os.Exit(2)
}

// argocd runs a resource health script as Argo CD's ExecuteHealthLua does
// (in runLua's state; no string library unless useOpenLibs is set): a table
// returned with `status` and `message`. Before any script, Argo CD reports an
// object being deleted as Progressing "Pending deletion" (controller/health.go);
// so does this.
func argocd(u *unstructured.Unstructured, script string) answer {
	if u.GetDeletionTimestamp() != nil {
		return answer{"Progressing", "Pending deletion"}
	}
	l, err := runLua(u, script)
	defer l.Close()
	if err != nil {
		return answer{"Unknown", "lua error: " + err.Error()}
	}
	ret := l.Get(-1)
	tbl, ok := ret.(*lua.LTable)
	if !ok {
		return answer{"Unknown", fmt.Sprintf("expect table output from health Lua script, not %s", ret.Type())}
	}
	a := answer{lua.LVAsString(tbl.RawGetString("status")), lua.LVAsString(tbl.RawGetString("message"))}
	switch a.Status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
		return a
	}
	// Argo CD's answer to a status it does not know.
	return answer{"Unknown", "Lua returned an invalid health status"}
}

// runLua is Argo CD's util/lua runLua for health, discovery and action
// scripts alike: a fresh state with only the package, base and table
// libraries, a one second budget, the object as the global `obj`. (Argo CD
// also offers a reduced `os`; our scripts do not use it, so it is left out and
// a script that needs it fails here.)
func runLua(u *unstructured.Unstructured, script string) (*lua.LState, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			fail("opening lua library %s: %v", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, u.Object))
	return l, l.DoString(script)
}

// discover runs a discovery script as Argo CD's ExecuteResourceActionDiscovery
// does: the returned table, encoded by gopher-json, maps action names to
// tables whose `disabled` (default false) greys the action out.
func discover(u *unstructured.Unstructured, script string) map[string]action {
	l, err := runLua(u, script)
	defer l.Close()
	if err != nil {
		fail("discovery lua: %v", err)
	}
	raw, err := luajson.Encode(l.Get(-1))
	if err != nil {
		fail("discovery lua returned no table: %v", err)
	}
	out := map[string]action{}
	if string(raw) == "[]" {
		return out
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		fail("discovery lua returned %s: %v", raw, err)
	}
	for name, v := range m {
		a := action{}
		if t, ok := v.(map[string]any); ok {
			a.Disabled, _ = t["disabled"].(bool)
		}
		out[name] = a
	}
	return out
}

// runAction runs an action script as Argo CD's ExecuteResourceAction and
// RunResourceAction do for an old-style action (the script returns the
// changed object): encode the returned table with gopher-json, turn empty
// arrays that were objects back into objects (cleanReturnedObj), and send
// the JSON merge patch from the live object to it. A patch that touches
// status would go to the status subresource; it is an error here, since our
// actions only ask.
func runAction(live []byte, u *unstructured.Unstructured, script string) json.RawMessage {
	l, err := runLua(u, script)
	defer l.Close()
	if err != nil {
		fail("action lua: %v", err)
	}
	raw, err := luajson.Encode(l.Get(-1))
	if err != nil || len(raw) < 2 || raw[0] != '{' {
		fail("action lua must return the object, got %s (%v)", raw, err)
	}
	var changed map[string]any
	if err := json.Unmarshal(raw, &changed); err != nil {
		fail("action lua returned %s: %v", raw, err)
	}
	var liveObj map[string]any
	if err := json.Unmarshal(live, &liveObj); err != nil {
		fail("decoding the object: %v", err)
	}
	changed = cleanReturned(changed, liveObj)
	// Both sides marshalled the same way, as Argo CD marshals both.
	liveBytes, _ := json.Marshal(liveObj)
	newBytes, _ := json.Marshal(changed)
	patch, err := jsonpatch.CreateMergePatch(liveBytes, newBytes)
	if err != nil {
		fail("merge patch: %v", err)
	}
	if string(patch) == "{}" {
		return json.RawMessage("null")
	}
	var p map[string]any
	_ = json.Unmarshal(patch, &p)
	if _, ok := p["status"]; ok {
		fail("the action changes status: %s", patch)
	}
	return patch
}

// cleanReturned: Lua cannot tell an empty table from an empty array, and
// gopher-json encodes it as []; Argo CD puts back the objects that were
// objects in the live object (cleanReturnedObj).
func cleanReturned(changed, live map[string]any) map[string]any {
	for k, old := range live {
		nv, ok := changed[k]
		if !ok {
			continue
		}
		switch n := nv.(type) {
		case map[string]any:
			if o, ok := old.(map[string]any); ok {
				changed[k] = cleanReturned(n, o)
			}
		case []any:
			switch o := old.(type) {
			case map[string]any:
				if len(n) == 0 {
					changed[k] = o
				}
			case []any:
				for i := range n {
					if i >= len(o) {
						break
					}
					if nm, ok := n[i].(map[string]any); ok {
						if om, ok := o[i].(map[string]any); ok {
							n[i] = cleanReturned(nm, om)
						}
					}
				}
			}
		}
	}
	return changed
}

// decodeValue is Argo CD's conversion of an unstructured object to Lua values.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// flux evaluates a healthCheckExprs entry as kustomize-controller's CEL
// status reader does (RFC-0009): an object whose status.observedGeneration
// differs from metadata.generation is InProgress without evaluating anything;
// otherwise inProgress, failed and current are evaluated in this order and
// the first true one wins; none true is InProgress. An evaluation error is
// printed as status "Error" (kustomize-controller logs it and keeps waiting).
func flux(u *unstructured.Unstructured, file string) answer {
	raw, err := os.ReadFile(file)
	if err != nil {
		fail("%v", err)
	}
	var exprs struct {
		Current    string `json:"current"`
		InProgress string `json:"inProgress"`
		Failed     string `json:"failed"`
	}
	if err := yaml.Unmarshal(raw, &exprs); err != nil {
		fail("%s: %v", file, err)
	}
	og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if gen, ok, _ := unstructured.NestedInt64(u.Object, "metadata", "generation"); found && ok && og != gen {
		return answer{"InProgress", fmt.Sprintf("observedGeneration %d, generation %d", og, gen)}
	}
	for _, e := range []struct{ expr, status string }{
		{exprs.InProgress, "InProgress"},
		{exprs.Failed, "Failed"},
		{exprs.Current, "Current"},
	} {
		if strings.TrimSpace(e.expr) == "" {
			continue
		}
		ok, err := evalBool(e.expr, u.Object)
		if err != nil {
			// The reader returns the error: kustomize-controller reports the
			// resource as not ready (Unknown) and keeps polling until timeout.
			return answer{"Error", fmt.Sprintf("%s expression: %v", e.status, err)}
		}
		if ok {
			return answer{e.status, ""}
		}
	}
	return answer{"InProgress", "no expression is true"}
}

// evalBool runs one expression as github.com/fluxcd/pkg/runtime/cel does for
// health checks: parsed (not compiled, no declared variables, since CRDs need
// not have the usual top-level fields), the object's own map as the
// activation, optimized evaluation.
func evalBool(expr string, obj map[string]any) (bool, error) {
	env, err := cel.NewEnv(cel.HomogeneousAggregateLiterals(), cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true), cel.CrossTypeNumericComparisons(true), cel.OptionalTypes(),
		ext.Strings(), ext.Sets(), ext.Encoders())
	if err != nil {
		return false, err
	}
	ast, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return false, iss.Err()
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
	if err != nil {
		return false, err
	}
	out, _, err := prg.ContextEval(context.Background(), obj)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("expression %q does not return a boolean", expr)
	}
	return bool(b), nil
}
