-- language is the interface language a user chose ('zh' or 'en'); '' follows the browser.
ALTER TABLE users ADD COLUMN language text NOT NULL DEFAULT '' CHECK (language IN ('', 'zh', 'en'));
