"use strict";
(() => {
  // The chat template's preview: each turn is the template with {role} and {content} filled in;
  // the assistant's content is what SFT learns (trainer/finetune/chat.py does the same).
  // The settings are swapped in as the choices change (finetune_fields.js): it says so with
  // "finetune:settings", and the preview binds to the new field.
  const bind = () => {
    const field = document.getElementById("id_chat_template");
    const out = document.getElementById("chat-preview");
    if (!field || !out) return;
    const turns = [["user", "What does the function os.getcwd do?"], ["assistant", "Return a string representing the current working directory."]];
    const show = () => {
      const template = field.value;
      out.replaceChildren();
      if (template.split("{content}").length !== 2) {
        out.textContent = "The template must hold {content} exactly once.";
        return;
      }
      for (const [role, content] of turns) {
        const [before, after] = template.split("{role}").join(role).split("{content}");
        out.append(before);
        if (role === "assistant") {
          const mark = document.createElement("mark");
          mark.textContent = content + " <end-of-text>";
          out.append(mark);
        } else {
          out.append(content);
        }
        out.append(after);
      }
  };
  field.addEventListener("input", show);
  show();
  };
  document.addEventListener("finetune:settings", bind);
  bind();
})();
