"""Rich text shared by both front-ends (the headless console and the Textual screens); no Textual here."""
