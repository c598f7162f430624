// Package mcp is kiln's Model Context Protocol transport: the tools a model calls to
// run code in kiln's sessions (execute, new_session, fork_session, upload_file, ...),
// their files as resources, served over MCP Streamable HTTP at /mcp, and the stdio
// bridge of `kiln mcp`, which forwards a client's calls to a running kiln.
//
// It speaks to the session layer (Sessions) the way package api does, never to the executor or
// a sandbox runtime, and it is the only importer of the MCP SDK.
package mcp
