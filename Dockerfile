# gpu-medic: one image for both roles; docker-compose.yml runs it as `bot` and as `worker`.
# Two stages: `build` compiles the TypeScript to JavaScript (tsc -p tsconfig.build.json into
# dist/, the same compiler that type-checks it); the runtime stage holds only the compiled code
# and the production dependencies: no TypeScript, no loader, nothing compiled at start.

FROM node:20-slim AS build
WORKDIR /app
# `npm install` honours the lockfile; `npm ci` refuses it because vite (dev only) names an optional
# Windows-only package the registry does not serve, so the lock cannot list it.
COPY package.json package-lock.json ./
RUN npm install --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src/ ./src/
COPY commands/ ./commands/
COPY workers/ ./workers/
RUN npm run -s build

FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /app

# Dependencies first so the layer is cached until the lockfile changes. --omit=dev: typescript,
# tsx, vitest and @types are only for building and checking. Optional native add-ons (cpu-features
# for ssh2, msgpackr-extract for BullMQ) may not build on slim without a compiler; both have
# pure-JS fallbacks.
COPY package.json package-lock.json ./
RUN npm install --omit=dev --no-audit --no-fund \
 && npm cache clean --force

# Only what runs. No .env, inventory or keys: those arrive at run time (see .dockerignore).
COPY --from=build /app/dist/ ./dist/
# The operator's command, on PATH: `docker compose exec worker gpu-medic doctor`.
RUN chmod +x dist/src/main.js && ln -s /app/dist/src/main.js /usr/local/bin/gpu-medic

# The code stays root-owned and read-only to the process; it runs as the image's `node` user
# (uid 1000), which is the uid the mounted SSH keys must be readable by.
USER node

# node itself rather than npm: no wrapper process, so SIGTERM reaches main.js, which closes the
# Slack socket and lets running jobs finish.
ENTRYPOINT ["node", "dist/src/main.js"]
CMD ["start"]
