package auth

import (
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

// ParseKey reads one public key: PEM (a PKIX "PUBLIC KEY" or a PKCS #1 "RSA PUBLIC
// KEY"), or one JWK. A PEM given on one line with literal \n (as environment variables
// carry it) is read too. The JWK's alg, when it has one, binds the key to it.
func ParseKey(data []byte) (Key, error) {
	text := strings.TrimSpace(strings.ReplaceAll(string(data), `\n`, "\n"))
	if strings.HasPrefix(text, "{") {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON([]byte(text)); err != nil {
			return Key{}, fmt.Errorf("JWK: %w", err)
		}
		return jwkKey(jwk)
	}
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		return Key{}, errors.New("neither PEM nor a JWK")
	}
	switch block.Type {
	case "PUBLIC KEY":
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return Key{}, fmt.Errorf("PEM: %w", err)
		}
		return publicKey(key)
	case "RSA PUBLIC KEY":
		key, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return Key{}, fmt.Errorf("PEM: %w", err)
		}
		return Key{Key: key}, nil
	}
	return Key{}, fmt.Errorf("PEM block %q: want a PUBLIC KEY", block.Type)
}

func publicKey(key any) (Key, error) {
	switch k := key.(type) {
	case ed25519.PublicKey:
		return Key{Key: k}, nil
	case *rsa.PublicKey:
		return Key{Key: k}, nil
	}
	return Key{}, fmt.Errorf("a %T key: want Ed25519 or RSA", key)
}

func jwkKey(jwk jose.JSONWebKey) (Key, error) {
	if !jwk.IsPublic() {
		return Key{}, errors.New("a private JWK: give the public key only")
	}
	k, err := publicKey(jwk.Key)
	if err != nil {
		return Key{}, err
	}
	k.Alg = jwk.Algorithm
	return k, nil
}

// ParseJWKS reads a JWKS document ({"keys": [...]}); each key is found by its kid, and
// a key without one is an error.
func ParseJWKS(data []byte) (map[string]Key, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	keys := map[string]Key{}
	for i, raw := range set.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		if jwk.KeyID == "" {
			return nil, fmt.Errorf("JWKS key %d has no kid", i)
		}
		k, err := jwkKey(jwk)
		if err != nil {
			return nil, fmt.Errorf("JWKS key %q: %w", jwk.KeyID, err)
		}
		keys[jwk.KeyID] = k
	}
	return keys, nil
}

// LoadDir reads one public key per file of dir (PEM or JWK); a key's kid is its file's
// name without the extension. Hidden files are skipped.
func LoadDir(dir string) (map[string]Key, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	keys := map[string]Key{}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		k, err := ParseKey(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		keys[strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))] = k
	}
	return keys, nil
}
