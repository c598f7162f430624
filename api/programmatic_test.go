package api

import "testing"

// TestFunctionName holds the names to LibreChat's client (normalizeToPythonIdentifier,
// normalizeToBashIdentifier in @librechat/agents): the code must call tools by the
// names the client's prompt promises.
func TestFunctionName(t *testing.T) {
	for _, c := range []struct{ tool, lang, want string }{
		{"get-weather", "python", "get_weather"},
		{"web search", "python", "web_search"},
		{"files.read", "python", "filesread"},
		{"files.read", "bash", "files_read"},
		{"3d-render", "python", "_3d_render"},
		{"class", "python", "class_tool"},
		{"import", "python", "import_tool"},
		{"local", "bash", "local_tool"},
		{"class", "bash", "class"},
		{"mcp__srv__tool!", "python", "mcp__srv__tool"},
		{"émoji✓", "python", "moji"},
	} {
		if got := functionName(c.tool, c.lang); got != c.want {
			t.Errorf("functionName(%q, %s) = %q, want %q", c.tool, c.lang, got, c.want)
		}
	}
}

func TestParseToken(t *testing.T) {
	const id = "k2Xv0n4lY8pQ1rT7uW3zA"
	for _, c := range []struct {
		token, instance, id, secret string
		ok                          bool
	}{
		{"kiln-1." + id + ".s3cret", "kiln-1", id, "s3cret", true},
		{"host.example.com." + id + ".s", "host.example.com", id, "s", true},
		{"." + id + ".s", "", id, "s", true},
		{"kiln-1." + id + ".", "", "", "", false},
		{"kiln-1.not-an-id.s", "", "", "", false},
		{id, "", "", "", false},
		{"", "", "", "", false},
	} {
		instance, gotID, secret, ok := parseToken(c.token)
		if instance != c.instance || gotID != c.id || secret != c.secret || ok != c.ok {
			t.Errorf("parseToken(%q) = %q, %q, %q, %v", c.token, instance, gotID, secret, ok)
		}
	}
}
