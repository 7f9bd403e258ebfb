# gpu-medic: one image for both roles; docker-compose.yml runs it as `bot` and as `worker`.
# TypeScript runs through tsx (a runtime dependency), so there is no build step and no dist/.
FROM node:20-slim

ENV NODE_ENV=production
WORKDIR /app

# Dependencies first so the layer is cached until the lockfile changes. --omit=dev is enough:
# tsx (the runtime) is in "dependencies"; typescript, vitest and @types are only for checks.
# Optional native add-ons (cpu-features for ssh2, msgpackr-extract for BullMQ) may not build on
# slim without a compiler; both have pure-JS fallbacks.
# `npm install` honours the lockfile; `npm ci` refuses it because vite (dev only) names an optional
# Windows-only package the registry does not serve, so the lock cannot list it.
COPY package.json package-lock.json ./
RUN npm install --omit=dev --no-audit --no-fund \
 && npm cache clean --force

# Only what runs. No .env, inventory or keys: those arrive at run time (see .dockerignore).
COPY tsconfig.json ./
COPY src/ ./src/
COPY commands/ ./commands/
COPY workers/ ./workers/

# The code stays root-owned and read-only to the process; it runs as the image's `node` user
# (uid 1000), which is the uid the mounted SSH keys must be readable by.
USER node

# node --import tsx (tsx >= 4 on Node >= 20.6) rather than npx: no npm wrapper process, so
# SIGTERM reaches main.ts, which closes the Slack socket and lets running jobs finish.
ENTRYPOINT ["node", "--import", "tsx", "src/main.ts"]
CMD ["start"]
