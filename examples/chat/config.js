// Where the example's pieces listen, in one place: the session endpoint (which also serves the
// built page) and Vite's dev server. The page's origin is what runq must list in
// RUNQ_CORS_ORIGINS; session-endpoint.js prints it, and checks it with runq, when it starts.
export const HOST = process.env.HOST ?? "127.0.0.1";
export const SESSION_PORT = Number(process.env.PORT ?? 8787);
export const DEV_PORT = Number(process.env.VITE_PORT ?? 5173);
export const SESSION_URL = process.env.SESSION_URL ?? `http://${HOST}:${SESSION_PORT}`;

export function origin(port) {
  return `http://${HOST}:${port}`;
}
