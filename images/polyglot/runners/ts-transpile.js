// kiln's TypeScript step (languages.json, "ts"): transpiles one file to JavaScript without type
// checking, as tsx and Node's own type stripping do, so that code using Node's globals runs
// without type definitions Debian does not ship. Syntax errors are reported like tsc's, one
// per line, and exit 1. The output keeps ES modules as written (Node 20 runs a .js file as a
// module when it has import, export or top-level await, as CommonJS otherwise), with an inline
// source map so that stack traces (node --enable-source-maps) point into the TypeScript.
//
// usage: node ts-transpile.js SOURCE.ts OUTPUT.js
"use strict";

const fs = require("fs");
const path = require("path");
const ts = require("typescript");

const [source, output] = process.argv.slice(2);
const result = ts.transpileModule(fs.readFileSync(source, "utf8"), {
  fileName: path.basename(source),
  reportDiagnostics: true,
  compilerOptions: {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    esModuleInterop: true,
    inlineSourceMap: true,
    inlineSources: true,
  },
});
const errors = result.diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error);
if (errors.length > 0) {
  process.stderr.write(ts.formatDiagnostics(errors, {
    getCanonicalFileName: (name) => name,
    getCurrentDirectory: () => process.cwd(),
    getNewLine: () => "\n",
  }));
  process.exit(1);
}
fs.writeFileSync(output, result.outputText);
