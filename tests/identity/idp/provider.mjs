// A real OpenID provider for the identity tests: panva's oidc-provider (OpenID Certified) on
// loopback, issuing RFC 9068 JWT access tokens through the client-credentials grant, the
// authorization code flow with PKCE (its built-in login and consent pages, any password) and the
// device grant. Settings come from the environment (tests/identity/idp.py starts it):
//   PORT           the issuer's port on 127.0.0.1
//   AUDIENCE       the admin API's audience: every access token's `aud`
//   USERS          JSON {login: {email, name, groups, email_verified}}; unknown logins get no groups
//   REDIRECT_URIS  JSON list of the console client's redirect URIs
//   ORACLE_PORT    a second, test-only listener that signs whatever claims it is given with the
//                  provider's own key (POST /sign {header, claims}): how the tests make tokens the
//                  provider would never issue (expired, wrong audience, ...) with a valid signature.
import http from 'node:http';
import Provider from 'oidc-provider';
import { generateKeyPair, exportJWK, calculateJwkThumbprint, importJWK, CompactSign } from 'jose';

const PORT = Number(process.env.PORT);
const ORACLE_PORT = Number(process.env.ORACLE_PORT);
const ISSUER = `http://127.0.0.1:${PORT}`;
const AUDIENCE = process.env.AUDIENCE;
const USERS = JSON.parse(process.env.USERS || '{}');
const REDIRECT_URIS = JSON.parse(process.env.REDIRECT_URIS || '["http://127.0.0.1/callback"]');

function user(sub) {
  const u = USERS[sub] ?? {};
  return { email: u.email ?? `${sub}@example.test`, name: u.name ?? sub, groups: u.groups ?? [],
           email_verified: u.email_verified ?? true };
}

// A fresh key per start, its kid the RFC 7638 thumbprint: a restart is a real key rotation.
const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const jwk = await exportJWK(privateKey);
const signingKey = { ...jwk, kid: await calculateJwkThumbprint(jwk), alg: 'RS256', use: 'sig' };
const oracleKey = await importJWK(signingKey, 'RS256');

const provider = new Provider(ISSUER, {
  clients: [
    { client_id: 'console', client_secret: 'console-secret-for-tests-only', application_type: 'web',
      redirect_uris: REDIRECT_URIS,
      grant_types: ['authorization_code', 'refresh_token', 'client_credentials'],
      response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic' },
    { client_id: 'automation', client_secret: 'automation-secret-for-tests-only',
      grant_types: ['client_credentials'], response_types: [], redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic' },
    { client_id: 'sluicegate-cli', application_type: 'native', token_endpoint_auth_method: 'none',
      redirect_uris: ['http://127.0.0.1/callback'],
      grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'authorization_code', 'refresh_token'],
      response_types: ['code'] },
  ],
  pkce: { required: () => true },
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username'],
            groups: ['groups'] },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups', 'admin'],
  async findAccount(ctx, sub) {
    const u = user(sub);
    return { accountId: sub, async claims() {
      return { sub, email: u.email, email_verified: u.email_verified, name: u.name,
               preferred_username: sub, groups: u.groups }; } };
  },
  features: {
    devInteractions: { enabled: true },
    deviceFlow: { enabled: true }, clientCredentials: { enabled: true },
    revocation: { enabled: true }, introspection: { enabled: true },
    resourceIndicators: { enabled: true, defaultResource: () => AUDIENCE, useGrantedResource: () => true,
      getResourceServerInfo: () => ({ scope: 'admin', audience: AUDIENCE, accessTokenTTL: 300,
        accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } }) },
  },
  // A person's claims in the access token too, as Okta's and Entra ID's custom claims do.
  async extraTokenClaims(ctx, token) {
    if (!token.accountId) return undefined;
    const u = user(token.accountId);
    return { groups: u.groups, email: u.email, email_verified: u.email_verified, name: u.name };
  },
  ttl: { AccessToken: 300, AuthorizationCode: 60, IdToken: 300, DeviceCode: 300, Grant: 3600,
         Session: 3600, Interaction: 600, RefreshToken: 86400 },
  cookies: { keys: ['test-only-cookie-key-1'] },
  jwks: { keys: [signingKey] },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

const oracle = http.createServer((req, res) => {
  let body = '';
  req.on('data', (chunk) => { body += chunk; });
  req.on('end', async () => {
    try {
      const { header, claims } = JSON.parse(body);
      const protectedHeader = { alg: 'RS256', typ: 'at+jwt', kid: signingKey.kid, ...header };
      const token = await new CompactSign(new TextEncoder().encode(JSON.stringify(claims)))
        .setProtectedHeader(protectedHeader).sign(oracleKey);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token, kid: signingKey.kid }));
    } catch (err) {
      res.writeHead(400); res.end(String(err));
    }
  });
});

await new Promise((ok) => oracle.listen(ORACLE_PORT, '127.0.0.1', ok));
provider.listen(PORT, '127.0.0.1', () => console.log(`issuer ${ISSUER} kid ${signingKey.kid}`));
process.on('SIGTERM', () => process.exit(0));
