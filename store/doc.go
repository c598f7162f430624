// Package store owns what outlives a single execution: sessions, their state blob and
// their files. It defines the Store interface the rest of kiln depends on and two
// implementations of it:
//
//   - Disk keeps everything under one directory (DATA_DIR). It is the default for a
//     single kiln process. Every write goes to a temporary file that is synced and then
//     renamed into place, so a crash never leaves a torn blob or half a file.
//   - Redis keeps everything in a Redis server, so that several kiln processes behind a
//     load balancer share sessions. Redis expires a session's keys by itself.
//
// A session expires TTL after its last use (Session.LastUsedAt + TTL, reported in
// Session.ExpiresAt). Expired sessions are removed, with their state and files, by
// Sweep; RunSweeper calls it periodically. Until then a store still returns them, so
// callers that care compare ExpiresAt with their clock.
//
// The store records a session's Owner but never checks it: deciding who may see a
// session is the caller's job. Every id handed to a store must satisfy kiln.ValidID;
// anything else is reported as ErrNotFound, which is what keeps client-supplied ids out
// of file paths and Redis key names. Owner and entity strings may hold any bytes.
//
// Stores return copies: changing a returned value or a slice passed in never changes
// what is stored. Times are kept in UTC to the microsecond. All stores are safe for
// concurrent use.
//
// The behavioural tests every implementation must pass live in package storetest.
package store
