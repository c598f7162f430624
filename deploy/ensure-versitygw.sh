#!/usr/bin/env bash
# Makes sure versitygw, an S3-compatible server that serves a folder, is built for the
# object store's tests, under .cache/versitygw/<version>/. It never starts a server: the
# tests start their own on a free loopback port. Idempotent; prints the binary's path.
exec "$(dirname "$0")/go-tool.sh" versitygw github.com/versity/versitygw/cmd/versitygw "${VERSITYGW_VERSION:-v1.8.0}"
