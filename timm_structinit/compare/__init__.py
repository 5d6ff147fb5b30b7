""" `timm-structinit compare`: which init helps on your data, and is the difference real. The plan of a comparison
(`plan`), its runs side by side (`runner`), each on its share of the cores (`cores`), the estimate of a run's time
(`estimate`), the statistics (`stats`), the answer (`report`) and the files read back (`records`); the command itself
(`command`, `session`). """
