// A real OpenID Connect provider for qassist's tests: panva's oidc-provider (certified by the
// OpenID Foundation), listening on 127.0.0.1 only, with its own development login and consent
// pages. Started by tests/signin/conftest.py:
//
//   IDP_CONFIG='{"clients": [...], "accounts": {...}}' node tests/idp/provider.mjs
//
// It prints one line, `listening http://127.0.0.1:PORT`, once it answers. Besides the
// provider's own endpoints, /_test/ lets a test act as the company's IT department:
//   PUT  /_test/accounts/<id>  {"email", "name", "groups": [...], "disabled": bool}
//   POST /_test/tamper         {"claims": {...}} or {"forge": true}: the next ID token the
//                              token endpoint sends is changed (re-signed with the provider's
//                              own key) or signed with a key nobody published
import crypto from 'node:crypto';
import http from 'node:http';

import Provider from 'oidc-provider';

const config = JSON.parse(process.env.IDP_CONFIG || '{}');
const accounts = new Map(Object.entries(config.accounts || {}));
let tamper = null;

const signingKey = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
const jwk = { ...signingKey.export({ format: 'jwk' }), kid: 'qassist-test-1', use: 'sig', alg: 'RS256' };
const strangerKey = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;

function b64(value) {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function sign(header, payload, key) {
  const input = `${b64(header)}.${b64(payload)}`;
  return `${input}.${crypto.sign('sha256', Buffer.from(input), key).toString('base64url')}`;
}

function tampered(idToken, change) {
  const [header, payload] = idToken.split('.').slice(0, 2)
    .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString()));
  if (change.forge) {
    return sign(header, payload, strangerKey);  // the same kid, another key: a forgery
  }
  return sign(header, { ...payload, ...change.claims }, signingKey);
}

async function findAccount(ctx, id) {
  const account = accounts.get(id);
  if (!account || account.disabled) {
    return undefined;  // unknown or disabled: no code, no refresh
  }
  return {
    accountId: id,
    async claims() {
      return {
        sub: id,
        email: account.email,
        email_verified: true,
        name: account.name,
        preferred_username: account.username || id,
        groups: account.groups || [],
      };
    },
  };
}

function readJson(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (chunk) => { body += chunk; });
    req.on('end', () => {
      try { resolve(body ? JSON.parse(body) : {}); } catch (error) { reject(error); }
    });
  });
}

async function testControl(req, res) {
  const body = await readJson(req);
  const match = req.url.match(/^\/_test\/accounts\/([^/?]+)$/);
  if (req.method === 'PUT' && match) {
    accounts.set(decodeURIComponent(match[1]), body);
  } else if (req.method === 'POST' && req.url === '/_test/tamper') {
    tamper = body;
  } else {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(204).end();
}

const server = http.createServer();
server.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: config.clients || [],
    jwks: { keys: [jwk] },
    findAccount,
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
    // Claims in the ID token too (as Keycloak and Entra ID send them), not only at userinfo.
    conformIdTokenClaims: false,
    // Refresh tokens for every code (as Entra ID and Keycloak give), rotated at each use.
    issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
    rotateRefreshToken: true,
    pkce: { required: () => true },
    cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
    features: { devInteractions: { enabled: true }, revocation: { enabled: true } },
    ttl: {
      AccessToken: 600,
      AuthorizationCode: 60,
      IdToken: 600,
      Interaction: 600,
      RefreshToken: 86400,
      Session: 86400,
      Grant: 86400,
    },
  });
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path === '/token' && tamper && ctx.status === 200 && ctx.body?.id_token) {
      ctx.body = { ...ctx.body, id_token: tampered(ctx.body.id_token, tamper) };
      tamper = null;
    }
  });
  const callback = provider.callback();
  server.on('request', (req, res) => {
    if (req.url.startsWith('/_test/')) {
      testControl(req, res).catch((error) => res.writeHead(400).end(String(error)));
    } else {
      callback(req, res);
    }
  });
  console.log(`listening ${issuer}`);
});
