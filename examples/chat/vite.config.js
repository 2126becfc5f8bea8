import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// `npm run dev` serves the page on :5173 and hands /session to the session endpoint (:8787), so
// the page and its backend share an origin; runq itself is another origin (RUNQ_CORS_ORIGINS).
export default defineConfig({
  plugins: [react()],
  server: {
    host: "127.0.0.1",
    port: 5173,
    proxy: { "/session": process.env.SESSION_URL ?? "http://127.0.0.1:8787" },
  },
});
