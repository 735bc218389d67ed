/* The API reference: Swagger UI (static/vendor/swagger-ui/, from npm) draws the site's OpenAPI document. */
(function () {
  "use strict";
  function draw() {
    var target = document.getElementById("api-reference");
    if (!target || typeof window.SwaggerUIBundle === "undefined") return;
    window.SwaggerUIBundle({
      url: target.getAttribute("data-spec"),
      domNode: target,
      deepLinking: false,          // its links sit inside the operation buttons (nested-interactive)
      validatorUrl: null,          // no call to swagger.io's validator: nothing leaves the site
      defaultModelsExpandDepth: 0,
      docExpansion: "list",
      onComplete: function () {
        // Swagger UI's server list has a visible caption but no <label>
        var servers = document.getElementById("servers");
        if (servers) servers.setAttribute("aria-label", "Server");
        target.setAttribute("data-rendered", "1");
      },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
