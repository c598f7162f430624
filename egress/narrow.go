package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Network is a call's request field "network", which can narrow the policy for that
// call and never widen it. In JSON it is false, which closes egress for the call, or
// {"allow": [...]}, which keeps only what both the call's patterns and the policy
// allow. A call that sends no field gets the policy as it is (a nil *Network).
//
// The zero Network narrows to an empty list, so it closes: a Network built in Go
// without thought refuses rather than allows.
type Network struct {
	Off   bool     // the JSON value false
	Allow []string // the patterns of {"allow": [...]}
}

// maxCallPatterns bounds the patterns one call may send.
const maxCallPatterns = 64

// UnmarshalJSON reads false or {"allow": [...]}; anything else, true and unknown
// fields included, is an error, so that a typo never leaves a call with more than it
// asked for.
func (n *Network) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if string(data) == "false" {
		*n = Network{Off: true}
		return nil
	}
	if len(data) == 0 || data[0] != '{' {
		return errors.New(`network: want false or {"allow": [...]}`)
	}
	var v struct {
		Allow *[]string `json:"allow"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf(`network: want false or {"allow": [...]}: %w`, err)
	}
	if v.Allow == nil {
		return errors.New(`network: an object needs "allow" (a list, empty to close)`)
	}
	*n = Network{Allow: *v.Allow}
	return nil
}

// MarshalJSON writes the forms UnmarshalJSON reads.
func (n Network) MarshalJSON() ([]byte, error) {
	if n.Off {
		return []byte("false"), nil
	}
	allow := n.Allow
	if allow == nil {
		allow = []string{}
	}
	return json.Marshal(struct {
		Allow []string `json:"allow"`
	}{allow})
}

// Narrow returns the policy a call runs under: p itself when n is nil, a closed policy
// when n is off, and otherwise p with its allow list replaced by the intersection of
// p's and n's: a request passes only where a pattern of each allows it. Resolution,
// private ranges and caps stay the operator's. A pattern of the call that is wider than
// the operator's (a broader wildcard, another port, an address) only keeps the part the
// operator allows, often nothing. Malformed patterns are errors naming network.allow.
func (p Policy) Narrow(n *Network) (Policy, error) {
	if n == nil {
		return p, nil
	}
	out := p
	out.allow = nil
	if !p.narrowed {
		out.wide = p.allow
	}
	out.narrowed = true
	if n.Off {
		out.off = true
		return out, nil
	}
	if len(n.Allow) > maxCallPatterns {
		return Policy{}, fmt.Errorf("network.allow: more than %d patterns", maxCallPatterns)
	}
	call, err := parseAllow("network.allow", n.Allow)
	if err != nil {
		return Policy{}, err
	}
	for _, c := range call {
		for _, o := range p.allow {
			if both, ok := c.intersect(o); ok {
				out.allow = addPattern(out.allow, both)
			}
		}
	}
	return out, nil
}
