// Sign-in links carry the token in the URL fragment (never sent to the server or logged);
// fill the form from it and submit.
"use strict";
(() => {
  function fromHash() {
    const m = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
    if (!m) return;
    document.getElementById("token").value = decodeURIComponent(m[1]);
    history.replaceState(null, "", location.pathname);
    document.getElementById("signin-form").submit();
  }
  document.addEventListener("DOMContentLoaded", fromHash);
  window.addEventListener("hashchange", fromHash);
})();
