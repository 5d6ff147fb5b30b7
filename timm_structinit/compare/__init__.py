""" `timm-structinit compare`: which init helps on your data, and is the difference real. The plan of a comparison
(`plan`), its runs side by side (`runner`), the statistics (`stats`) and the answer (`report`); the command itself
(`command`, `session`). """
