// An OpenID provider on loopback for the access tests: oidc-provider (OpenID-certified),
// issuing JWT access tokens (RFC 9068) for one resource by client credentials.
//
//   node provider.mjs <path of oidc-provider's lib/index.js>
//
// Environment: RESOURCE (the resources tokens may be for, separated by spaces; the first is
// the default), PORT (default 0: any), ACCESS_TTL (seconds an access token lasts, default
// 600), KID (the
// signing key's id, default k1; a provider started again with another kid has rotated its
// key), REDIRECT (when set: a client `web` signs people in by authorization code with PKCE,
// back to this redirect URI, through oidc-provider's own login and consent pages, where any
// login and password will do), SIGN_IN (when set: clients register themselves, RFC 7591,
// and sign people in through the same pages; a client that may refresh gets a refresh token,
// and tokens can be revoked at /token/revocation). Prints `issuer <url>` once it listens,
// and `registered <client id>` for each client that registers itself. Clients (secret = id +
// "-secret"): `tools` (tokens for 10 minutes), `reports` (`tools:calculate` only), `brief`
// (tokens for 1 second), `web`, and
// `eternal`, whose tokens are signed as any other's but expire at 2^63 s (a server must refuse
// them without overflowing its clock). The signing library refuses to write a header with
// `crit`: toolhost-access's own tests sign those.
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';

const { default: Provider, errors } = await import(pathToFileURL(process.argv[2]).href);
const resources = process.env.RESOURCE.split(' ');
const kid = process.env.KID || 'k1';
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const key = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
const client = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
});

const clients = ['tools', 'brief', 'eternal'].map(client);
// `reports` may hold `tools:calculate` alone: asked for more, the provider refuses the
// request (`invalid_scope`), as providers with per-client scopes do.
clients.push({ ...client('reports'), scope: 'tools:calculate' });
// What the odd clients' tokens say, set as each is signed.
const odd = {
  eternal: (token) => { token.payload.exp = 2 ** 63; },
};
if (process.env.REDIRECT) {
  clients.push({
    client_id: 'web',
    client_secret: 'web-secret',
    grant_types: ['authorization_code'],
    redirect_uris: [process.env.REDIRECT],
    response_types: ['code'],
  });
}

const server = createServer();
server.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients,
    scopes: ['openid', 'offline_access', 'tools:calculate', 'tools:all'],
    jwks: { keys: [key] },
    formats: {
      customizers: {
        jwt: (ctx, token, structured) => odd[token.clientId]?.(structured),
      },
    },
    // A registered client that may refresh gets a refresh token, `offline_access` or not
    // (how a provider for MCP servers that people sign in to is set up).
    ...(process.env.SIGN_IN ? {
      issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
    } : {}),
    features: {
      devInteractions: { enabled: Boolean(process.env.REDIRECT || process.env.SIGN_IN) },
      registration: { enabled: Boolean(process.env.SIGN_IN) },
      revocation: { enabled: Boolean(process.env.SIGN_IN) },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resources[0],
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => {
          if (!resources.includes(indicator)) throw new errors.InvalidTarget();
          return {
            scope: 'tools:calculate tools:all',
            audience: indicator,
            accessTokenFormat: 'jwt',
            accessTokenTTL: ctx.oidc.client?.clientId === 'brief'
              ? 1 : Number(process.env.ACCESS_TTL || 600),
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
  });
  provider.on('registration_create.success', (ctx, client) => {
    console.log(`registered ${client.clientId}`);
  });
  server.on('request', provider.callback());
  console.log(`issuer ${issuer}`);
});
