import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";
import { DEV_PORT, HOST, SESSION_URL } from "./config.js";

// `npm run dev` serves the page on DEV_PORT and hands /session to the session endpoint, so the
// page and its backend share an origin; runq itself is another origin (RUNQ_CORS_ORIGINS).
// The ports come from config.js.
export default defineConfig({
  plugins: [react()],
  server: {
    host: HOST,
    port: DEV_PORT,
    strictPort: true,
    proxy: { "/session": SESSION_URL },
  },
});
