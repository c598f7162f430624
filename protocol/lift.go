package protocol

import (
	"bytes"
	"encoding/base64"
)

// liftState takes the value of the top-level "state" member out of a response payload
// when it is a plain base64 string, and returns the payload with that value replaced
// by null together with the decoded blob. encoding/json scans every byte of a string
// twice, which makes a state of a few megabytes cost tens of milliseconds; base64
// needs no JSON escapes, so the string can be cut out with one search for its closing
// quote. ok is false whenever the payload is not exactly that shape (no such member, a
// second one, escapes in the string, anything unexpected): the caller then decodes the
// whole payload with encoding/json, which also reports any malformed JSON.
func liftState(payload []byte) (rest, state []byte, ok bool) {
	var valStart, valEnd int
	found := false
	i := skipSpace(payload, 0)
	if i >= len(payload) || payload[i] != '{' {
		return nil, nil, false
	}
	i++
	for {
		i = skipSpace(payload, i)
		if i >= len(payload) {
			return nil, nil, false
		}
		if payload[i] == '}' {
			break
		}
		keyEnd, ok := skipString(payload, i)
		if !ok {
			return nil, nil, false
		}
		key := payload[i:keyEnd]
		i = skipSpace(payload, keyEnd)
		if i >= len(payload) || payload[i] != ':' {
			return nil, nil, false
		}
		i = skipSpace(payload, i+1)
		end, ok := skipValue(payload, i)
		if !ok {
			return nil, nil, false
		}
		if string(key) == `"state"` {
			if found {
				return nil, nil, false // a duplicate: encoding/json's rules decide
			}
			found = true
			valStart, valEnd = i, end
		}
		i = skipSpace(payload, end)
		if i < len(payload) && payload[i] == ',' {
			i++
		}
	}
	if !found || payload[valStart] != '"' {
		return nil, nil, false
	}
	b64 := payload[valStart+1 : valEnd-1]
	if bytes.IndexByte(b64, '\\') >= 0 {
		return nil, nil, false
	}
	state = make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := base64.StdEncoding.Decode(state, b64)
	if err != nil {
		return nil, nil, false
	}
	rest = make([]byte, 0, len(payload)-len(b64))
	rest = append(append(append(rest, payload[:valStart]...), "null"...), payload[valEnd:]...)
	return rest, state[:n], true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		j += k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j, true
		}
	}
}

// skipValue returns the index just past the JSON value starting at b[i]. It checks
// only structure; encoding/json validates the rest afterwards.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	for i < len(b) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(b[i])) {
		i++
	}
	return i, true
}
