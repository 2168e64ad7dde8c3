// Starts Swagger UI on /api/docs (a file, not an inline script: the app's CSP allows no inline code).
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  const el = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({ url: el.dataset.openapi, dom_id: "#swagger-ui", deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout" });
});
