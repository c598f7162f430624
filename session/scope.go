package session

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/kilnsh/kiln"
)

// Kinds of Scope, as LibreChat names them.
const (
	KindUser  = "user"  // the caller's own files
	KindAgent = "agent" // an agent's files, shared within the caller's tenant (or API key)
	KindSkill = "skill" // a skill's files at one version, shared likewise
)

// Scope is whose files an upload, a read or a run's file reference is about: the
// caller's own (KindUser), or a resource's, shared by every caller of the same tenant
// (or API key) who names it: an agent's (ID), or a skill's at one Version. A resource's
// files are read-only to code.
type Scope struct {
	Kind    string
	ID      string
	Version int64
}

// resourceID is what an agent's or a skill's id may look like (LibreChat's ids).
var resourceID = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ParseScope reads a scope as clients send it (kind, id, version: form fields or query
// parameters, or a file reference's). An empty kind is the caller's own files; a user's
// id is not checked: the caller's identity decides whose files they are.
func ParseScope(kind, id, version string) (Scope, error) {
	switch kind {
	case "", KindUser:
		if version != "" {
			return Scope{}, kiln.Errorf(kiln.CodeInvalid, "version is only valid for kind skill")
		}
		return Scope{Kind: KindUser}, nil
	case KindAgent, KindSkill:
	default:
		return Scope{}, kiln.Errorf(kiln.CodeInvalid, "kind must be one of: skill, agent, user")
	}
	if !resourceID.MatchString(id) {
		return Scope{}, kiln.Errorf(kiln.CodeInvalid, "id must be 1 to 128 characters of A-Z a-z 0-9 _ . : -")
	}
	s := Scope{Kind: kind, ID: id}
	switch {
	case kind == KindAgent && version != "":
		return Scope{}, kiln.Errorf(kiln.CodeInvalid, "version is only valid for kind skill")
	case kind == KindSkill:
		v, err := strconv.ParseInt(version, 10, 64)
		if err != nil || v < 0 {
			return Scope{}, kiln.Errorf(kiln.CodeInvalid, "version is required for kind skill: a whole number")
		}
		s.Version = v
	}
	return s, nil
}

// shared says whether the scope's files belong to a resource, read-only to code.
func (s Scope) shared() bool { return s.Kind == KindAgent || s.Kind == KindSkill }

// In returns the identity that owns the scope's sessions: the caller for its own files;
// for a resource, the caller's tenant (or key) with the resource in place of the user.
// "\x01" starts no user id a client can send (see Caller): a resource is no one's user.
func (c Caller) In(s Scope) Caller {
	switch s.Kind {
	case KindAgent:
		return Caller{Key: c.Key, User: "\x01agent:" + s.ID, Proven: true}
	case KindSkill:
		return Caller{Key: c.Key, User: "\x01skill:" + s.ID + ":v:" + strconv.FormatInt(s.Version, 10), Proven: true}
	}
	return c
}

// resourceOwned reports whether a session's owner is a resource (Caller.In).
func resourceOwned(owner string) bool {
	_, user, _ := strings.Cut(owner, "\x00")
	return strings.HasPrefix(user, "\x01")
}
