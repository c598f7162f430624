// Package auth verifies the signed user identities a platform sends with each request:
// LibreChat's per-user JSON Web Tokens (EdDSA or RS256, HS256 only when configured),
// checked against keys chosen by their kid, with the issuer, audience, times and claims
// LibreChat mints. It is the only importer of the JOSE library. The API turns a verified
// token into a caller: a user of a tenant.
package auth
