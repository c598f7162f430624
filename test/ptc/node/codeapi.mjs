// LibreChat's minter of per-user Code API tokens (packages/api/src/auth/codeapi.ts),
// ported line for line for kiln's tests (test/ptc/node/librechat-jwt.test.mjs): the
// settings codeapi.ts reads from CODEAPI_JWT_* are a config object here, so that one
// process can mint as two LibreChat deployments, one signing EdDSA and one RS256.
import { createHash, createPrivateKey, randomUUID, sign as cryptoSign } from 'node:crypto';

const DEFAULT_ISSUER = 'librechat';
const DEFAULT_AUDIENCE = 'codeapi';
const DEFAULT_SINGLE_TENANT_ID = 'legacy';
const MAX_TTL_SECONDS = 300;
const MAX_CACHE_SECONDS = 30;
const TOKEN_REUSE_SAFETY_WINDOW_SECONDS = 30;
const TOKEN_CACHE_PRUNE_INTERVAL_SECONDS = 30;

const base64Url = (value) => Buffer.from(value).toString('base64url');
const normalizePem = (value) => value.replace(/\\n/g, '\n').trim();

function parseCappedSeconds(value, fallback, max) {
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed <= 0) return fallback;
  return Math.min(Math.floor(parsed), max);
}

export function stringifyClaimValue(value) {
  if (typeof value === 'string' && value.trim() !== '') return value;
  if (value && typeof value === 'object' && 'toString' in value) {
    const s = value.toString();
    return s.trim() === '' ? undefined : s;
  }
  return undefined;
}

function canonicalContextHash({ userId, tenantId, role, principalSource, orgId, serviceId, chcUserId }) {
  const canonical = {
    chc_user_id: chcUserId ?? '',
    org_id: orgId ?? '',
    principal_source: principalSource,
    role,
    service_id: serviceId ?? '',
    sub: userId,
    tenant_id: tenantId,
  };
  return createHash('sha256').update(JSON.stringify(canonical)).digest('hex');
}

// createCodeApiAuth is codeapi.ts's module state and functions for one signing config:
// CODEAPI_JWT_ALGORITHM, CODEAPI_JWT_KID, CODEAPI_JWT_PRIVATE_KEY and the defaults of the rest.
export function createCodeApiAuth({ alg, kid, privateKey, ttl, cacheSeconds }) {
  const config = {
    alg,
    kid,
    issuer: DEFAULT_ISSUER,
    audience: DEFAULT_AUDIENCE,
    ttlSeconds: parseCappedSeconds(ttl, 300, MAX_TTL_SECONDS),
    cacheSeconds: parseCappedSeconds(cacheSeconds, 30, MAX_CACHE_SECONDS),
    key: createPrivateKey(normalizePem(privateKey)),
  };
  const tokenCache = new Map();
  let tokenCacheLastPrunedAt = 0;
  let signed = 0;

  function buildClaims(req, now) {
    const { user } = req;
    const userId = stringifyClaimValue(user.id) ?? stringifyClaimValue(user._id);
    if (!userId) throw new Error('Code API token minting requires a canonical user id');
    const tenantId = stringifyClaimValue(user.tenantId) ?? DEFAULT_SINGLE_TENANT_ID;
    const role = user.role ?? 'USER';
    const principalSource = req.authStrategy === 'openidJwt' ? 'openid_reuse' : 'librechat_jwt';
    const orgId = stringifyClaimValue(user.orgId);
    const serviceId = stringifyClaimValue(user.serviceId);
    const chcUserId = stringifyClaimValue(user.chcUserId) ?? stringifyClaimValue(user.idOnTheSource);
    const planId = stringifyClaimValue(user.planId) ?? stringifyClaimValue(user.subscription?.planId);
    const authContextHash = canonicalContextHash({
      userId, tenantId, role, principalSource, orgId, serviceId, chcUserId,
    });
    return {
      iss: config.issuer,
      aud: config.audience,
      sub: userId,
      iat: now,
      nbf: now,
      exp: now + config.ttlSeconds,
      jti: randomUUID(),
      tenant_id: tenantId,
      role,
      principal_source: principalSource,
      ...(orgId ? { org_id: orgId } : {}),
      ...(serviceId ? { service_id: serviceId } : {}),
      ...(chcUserId ? { chc_user_id: chcUserId } : {}),
      ...(planId ? { plan_id: planId } : {}),
      auth_context_hash: authContextHash,
    };
  }

  function signJwt(claims) {
    const header = { alg: config.alg, typ: 'JWT', kid: config.kid };
    const signingInput = `${base64Url(JSON.stringify(header))}.${base64Url(JSON.stringify(claims))}`;
    const signature = cryptoSign(config.alg === 'RS256' ? 'RSA-SHA256' : null, Buffer.from(signingInput), config.key);
    signed++;
    return `${signingInput}.${base64Url(signature)}`;
  }

  function cacheKey(claims) {
    return [
      config.alg, config.kid, claims.sub, claims.tenant_id, claims.role, claims.principal_source,
      claims.org_id ?? '', claims.service_id ?? '', claims.chc_user_id ?? '', claims.plan_id ?? '',
      claims.code_worker_id ?? '', claims.auth_context_hash,
    ].join(':');
  }

  function pruneTokenCache(now) {
    if (tokenCache.size === 0 || now - tokenCacheLastPrunedAt < TOKEN_CACHE_PRUNE_INTERVAL_SECONDS) return;
    tokenCacheLastPrunedAt = now;
    for (const [key, cached] of tokenCache) {
      if (cached.cachedUntil <= now || cached.expiresAt <= now + TOKEN_REUSE_SAFETY_WINDOW_SECONDS) {
        tokenCache.delete(key);
      }
    }
  }

  async function mintCodeApiToken(req) {
    const now = Math.floor(Date.now() / 1000);
    pruneTokenCache(now);
    const claims = buildClaims(req, now);
    const key = cacheKey(claims);
    const cached = tokenCache.get(key);
    if (cached && cached.cachedUntil > now && cached.expiresAt > now + TOKEN_REUSE_SAFETY_WINDOW_SECONDS) {
      return cached.token;
    }
    const token = signJwt(claims);
    tokenCache.set(key, {
      token,
      expiresAt: claims.exp,
      cachedUntil: Math.min(now + config.cacheSeconds, claims.exp - TOKEN_REUSE_SAFETY_WINDOW_SECONDS),
    });
    return token;
  }

  async function getCodeApiAuthHeaders(req) {
    const token = await mintCodeApiToken(req);
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  return { mintCodeApiToken, getCodeApiAuthHeaders, signedCount: () => signed };
}
