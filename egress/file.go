package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Policies are the per-tenant and per-key overrides of a policy file, a JSON document
// whose entries carry the fields of Settings:
//
//	{
//	  "default": {"allow": ["pypi.internal"], "resolve": ["pypi.internal=10.0.0.5"],
//	              "allow_private": ["10.0.0.5"]},
//	  "tenants": {"t1": {"allow": ["*.github.com"], "max_bytes": 104857600}},
//	  "keys":    {"k1": {"allow": []}}
//	}
//
// Precedence, most specific first: the entry of the caller's key, then of its tenant,
// then "default", then the policy of the environment (EGRESS_*). The entry that applies
// is taken whole, as the operator wrote it; nothing is inherited from a less specific
// one, so what a tenant may reach can be read from its entry alone. An entry may widen
// what the environment allows: the file is the operator's word too. Only a call's
// Network cannot widen.
type Policies struct {
	def     *Policy
	tenants map[string]Policy
	keys    map[string]Policy
}

// maxPolicyFile bounds the policy file kiln reads at start.
const maxPolicyFile = 4 << 20

// ParsePolicies parses a policy file, reporting every malformed entry at once, each
// error naming its place (tenants.t1.allow: ...). Unknown fields are errors.
func ParsePolicies(data []byte) (*Policies, error) {
	if len(data) > maxPolicyFile {
		return nil, fmt.Errorf("policy file: larger than %d bytes", maxPolicyFile)
	}
	var doc struct {
		Default *Settings           `json:"default"`
		Tenants map[string]Settings `json:"tenants"`
		Keys    map[string]Settings `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("policy file: more than one JSON value")
	}
	ps := &Policies{tenants: map[string]Policy{}, keys: map[string]Policy{}}
	var errs []error
	if doc.Default != nil {
		p, err := parsePolicy(*doc.Default, namesAt("default"))
		errs = append(errs, err)
		ps.def = &p
	}
	for _, group := range []struct {
		name    string
		entries map[string]Settings
		into    map[string]Policy
	}{{"tenants", doc.Tenants, ps.tenants}, {"keys", doc.Keys, ps.keys}} {
		for _, id := range sortedKeys(group.entries) {
			p, err := parsePolicy(group.entries[id], namesAt(fmt.Sprintf("%s.%s", group.name, id)))
			errs = append(errs, err)
			group.into[id] = p
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	return ps, nil
}

func namesAt(place string) settingNames {
	return settingNames{place + ".allow", place + ".resolve", place + ".allow_private", place}
}

func sortedKeys(m map[string]Settings) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Select returns the policy for a caller: its key's entry, else its tenant's, else
// the file's default, else base (the environment's policy). An empty tenant or key
// matches no entry. A nil *Policies selects base.
func (ps *Policies) Select(base Policy, tenant, key string) Policy {
	if ps == nil {
		return base
	}
	if p, ok := ps.keys[key]; ok && key != "" {
		return p
	}
	if p, ok := ps.tenants[tenant]; ok && tenant != "" {
		return p
	}
	if ps.def != nil {
		return *ps.def
	}
	return base
}
