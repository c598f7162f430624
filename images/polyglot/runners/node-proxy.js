// Preloaded into every Node process of the sandbox (NODE_OPTIONS). Node's fetch ignores
// HTTP_PROXY and HTTPS_PROXY (before Node 24's NODE_USE_ENV_PROXY): when kiln's egress is on
// and the REPL has set them, fetch goes through that proxy as curl, pip and requests do, and
// NO_PROXY is honoured. With no proxy set nothing changes.
'use strict';

const env = process.env;
if (env.HTTPS_PROXY || env.https_proxy || env.HTTP_PROXY || env.http_proxy) {
  try {
    const { EnvHttpProxyAgent, setGlobalDispatcher } = require('undici');
    // The agent warns once that it is experimental, on the code's stderr: not the code's concern.
    const warn = process.emitWarning;
    process.emitWarning = () => {};
    try {
      setGlobalDispatcher(new EnvHttpProxyAgent());
    } finally {
      process.emitWarning = warn;
    }
  } catch {
    // No undici: fetch goes direct, and fails as the sandbox has no network.
  }
}
