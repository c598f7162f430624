package main

import (
	"fmt"
	"maps"
	"os"
	"strings"

	"github.com/kilnsh/kiln/auth"
)

// aliases are LibreChat's code API server's names for kiln's JWT and profile settings,
// read when kiln's own name is not set, so that an operator can follow LibreChat's docs.
var aliases = []struct {
	name    string
	aliases []string
	field   func(*Config) *string
}{
	{"JWT_PUBLIC_KEY", []string{"CODEAPI_JWT_PUBLIC_KEY"}, func(c *Config) *string { return &c.JWTPublicKey }},
	{"JWT_KID", []string{"CODEAPI_JWT_KID", "CODEAPI_JWT_KEY_ID"}, func(c *Config) *string { return &c.JWTKid }},
	{"JWT_JWKS", []string{"CODEAPI_JWT_JWKS_JSON"}, func(c *Config) *string { return &c.JWTJWKS }},
	{"JWT_PUBLIC_KEYS_DIR", []string{"CODEAPI_JWT_PUBLIC_KEYS_DIR"}, func(c *Config) *string { return &c.JWTPublicKeysDir }},
	{"JWT_ISSUER", []string{"CODEAPI_JWT_ISSUER"}, func(c *Config) *string { return &c.JWTIssuer }},
	{"JWT_AUDIENCE", []string{"CODEAPI_JWT_AUDIENCE"}, func(c *Config) *string { return &c.JWTAudience }},
	{"JWT_ALGORITHMS", []string{"CODEAPI_JWT_ALLOWED_ALGS"}, func(c *Config) *string { return &c.JWTAlgorithms }},
	{"JWT_HS256_SECRET", []string{"CODEAPI_JWT_HS256_SECRET"}, func(c *Config) *string { return &c.JWTHS256Secret }},
	{"JWT_HS256_KID", []string{"CODEAPI_JWT_HS256_KID"}, func(c *Config) *string { return &c.JWTHS256Kid }},
	{"JWT_DEFAULT_TENANT", []string{"CODEAPI_JWT_SINGLE_TENANT_ID"}, func(c *Config) *string { return &c.JWTDefaultTenant }},
	{"EXECUTION_PROFILES", []string{"CODEAPI_EXECUTION_PROFILE"}, func(c *Config) *string { return &c.ExecutionProfiles }},
}

// readAliases fills each setting kiln's name leaves unset from the first of its
// aliases that is set.
func (c *Config) readAliases() {
	for _, a := range aliases {
		if _, set := os.LookupEnv(a.name); set {
			continue
		}
		for _, alias := range a.aliases {
			if v, ok := os.LookupEnv(alias); ok && v != "" {
				*a.field(c) = v
				break
			}
		}
	}
}

// jwtConfigured says whether any verification key is set: tokens are verified then.
func (c Config) jwtConfigured() bool {
	return c.JWTPublicKey != "" || c.JWTJWKS != "" || c.JWTPublicKeysDir != "" || c.JWTHS256Secret != ""
}

// tokens builds the verifier of signed identities from the keys configured; nil when none
// is. Errors name the setting at fault.
func (c Config) tokens() (*auth.Verifier, error) {
	if !c.jwtConfigured() {
		return nil, nil
	}
	keys := map[string]auth.Key{}
	add := func(source string, more map[string]auth.Key) error {
		for kid := range more {
			if _, dup := keys[kid]; dup {
				return fmt.Errorf("%s: kid %q is given twice", source, kid)
			}
		}
		maps.Copy(keys, more)
		return nil
	}
	if c.JWTPublicKey != "" {
		k, err := auth.ParseKey([]byte(c.JWTPublicKey))
		if err != nil {
			return nil, fmt.Errorf("JWT_PUBLIC_KEY: %w", err)
		}
		if err := add("JWT_PUBLIC_KEY", map[string]auth.Key{c.JWTKid: k}); err != nil {
			return nil, err
		}
	}
	if c.JWTJWKS != "" {
		doc := []byte(c.JWTJWKS)
		if !strings.HasPrefix(strings.TrimSpace(c.JWTJWKS), "{") { // a path to the document
			var err error
			if doc, err = os.ReadFile(c.JWTJWKS); err != nil {
				return nil, fmt.Errorf("JWT_JWKS: %w", err)
			}
		}
		set, err := auth.ParseJWKS(doc)
		if err != nil {
			return nil, fmt.Errorf("JWT_JWKS: %w", err)
		}
		if err := add("JWT_JWKS", set); err != nil {
			return nil, err
		}
	}
	if c.JWTPublicKeysDir != "" {
		set, err := auth.LoadDir(c.JWTPublicKeysDir)
		if err != nil {
			return nil, fmt.Errorf("JWT_PUBLIC_KEYS_DIR: %w", err)
		}
		if err := add("JWT_PUBLIC_KEYS_DIR", set); err != nil {
			return nil, err
		}
	}
	algs := strings.FieldsFunc(c.JWTAlgorithms, func(r rune) bool { return r == ',' || r == ' ' })
	if c.JWTHS256Secret != "" {
		if err := add("JWT_HS256_SECRET", map[string]auth.Key{c.JWTHS256Kid: {Key: []byte(c.JWTHS256Secret), Alg: auth.HS256}}); err != nil {
			return nil, err
		}
		if !strings.Contains(c.JWTAlgorithms, auth.HS256) {
			algs = append(algs, auth.HS256) // a secret configured is HS256 allowed
		}
	}
	v, err := auth.New(auth.Config{Keys: keys, Issuer: c.JWTIssuer, Audience: c.JWTAudience, Algorithms: algs,
		DefaultTenant: c.JWTDefaultTenant})
	if err != nil {
		return nil, fmt.Errorf("JWT settings: %w", err)
	}
	return v, nil
}
